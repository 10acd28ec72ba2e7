package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// fdLimitedChild, set in its environment, makes the test binary
// serveUnderFDLimit instead of running tests.
const fdLimitedChild = "FLOODGATE_TEST_FD_LIMITED_SERVE"

// childFDLimit is the child's RLIMIT_NOFILE: a default ulimit -n, as the
// review that found the exhaustion ran under.
const childFDLimit = 1024

// serveUnderFDLimit runs the service from the environment with at most
// childFDLimit file descriptors, printing "GRPC HTTP" on stdout once it
// listens; it stops on SIGTERM.
func serveUnderFDLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "getrlimit:", err)
		return 1
	}
	lim.Cur = childFDLimit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		return 1
	}
	return serve(context.Background(), nil, os.Getenv, os.Stderr, serveHooks{ready: func(g, h, _ string) { fmt.Printf("%s %s\n", g, h) }})
}

// TestServeConnectionBounds: a client opening connections and sending
// nothing takes no more than a listener's bound of the process's file
// descriptors, and loses them after the setup timeout. The service runs
// in a child process under a limit of 1,024 descriptors; 1,100 silent
// connections to its gRPC port (the review's attack) leave /healthcheck
// answering at once (without the bound, every accept failed with "too
// many open files" until grpc-go's 120s connection timeout), a new gRPC
// client is served once the silent ones are dropped, a silent gRPC
// connection is closed after connSetupTimeout and so is a silent HTTP
// one (it was 10s).
func TestServeConnectionBounds(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fdLimitedChild+"=1", "CONFIG_DIR=../../examples/rls/config",
		"GRPC_ADDR=127.0.0.1:0", "HTTP_ADDR=127.0.0.1:0", "DECISION_TIMEOUT=2s")
	logs := &syncbuf.Buffer{}
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("the service: %v\n%s", err, logs.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	rpc, web, ok := strings.Cut(strings.TrimSpace(line), " ")
	if err != nil || !ok {
		t.Fatalf("the service did not start: %q %v\n%s", line, err, logs.String())
	}

	silentHTTP, err := net.Dial("tcp", web)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, silentHTTP)
	start := time.Now()
	for i := range 1100 {
		c, err := net.DialTimeout("tcp", rpc, 5*time.Second)
		if err != nil {
			t.Fatalf("silent connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Not a measure of speed: a bound on "at once", well under the 5s
	// after which the silent connections go.
	hc := &http.Client{Timeout: 3 * time.Second}
	res, err := hc.Get("http://" + web + "/healthcheck")
	if err != nil {
		t.Fatalf("/healthcheck beside 1,100 silent gRPC connections: %v\n%s", err, logs.String())
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "OK\n" {
		t.Errorf("/healthcheck beside 1,100 silent gRPC connections: %d %q", res.StatusCode, b)
	}

	conn, err := grpc.NewClient(rpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}},
		grpc.WaitForReady(true))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetLimitRemaining() != 59 {
		t.Errorf("a gRPC call beside 1,100 silent connections: %v, %v; want OK leaving 59 of 60", resp, err)
	}

	// closed reads c until the service closes it, failing if it has not
	// within d of start.
	closed := func(what string, c net.Conn, d time.Duration) {
		t.Helper()
		c.SetReadDeadline(start.Add(d))
		if n, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: still open %v after it was opened (%d bytes read): %v", what, d, n, err)
		}
	}
	closed("a silent HTTP connection", silentHTTP, 8*time.Second)
	closed("the first silent gRPC connection", conns[1], 15*time.Second)
	if strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the service ran out of file descriptors:\n%s", logs.String())
	}
}
