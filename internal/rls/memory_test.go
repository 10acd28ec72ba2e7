package rls_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// memoryChild makes the test binary the service of
// TestRequestMemoryIsBounded: TestRequestMemoryChild serves then.
const memoryChild = "FLOODGATE_RLS_MEMORY_CHILD"

// TestRequestMemoryChild is the service that TestRequestMemoryIsBounded
// floods, in a process of its own so that its memory is its own: an
// instance on memstore that prints its gRPC address and HTTP URL and
// serves until its standard input closes.
func TestRequestMemoryChild(t *testing.T) {
	if os.Getenv(memoryChild) == "" {
		t.Skip("the service of TestRequestMemoryIsBounded")
	}
	svc := start(t, setup{yaml: floodConfig, store: memstore.New(memstore.Options{})})
	fmt.Printf("%s %s\n", svc.conn.Target(), svc.url)
	io.Copy(io.Discard, os.Stdin)
}

// What requests can make the service hold stays under its documented
// bound, whatever the number of connections (unbounded, two connections
// of 1,000 streams of ~1 MiB requests took the service from 21 MiB to
// 4,023 MiB, and /json bodies were read and decoded outside any bound). The service runs in a process of its own, with
// GOMEMLIMIT at 384 MiB so that its resident size follows what is live
// (without it, the garbage collector lets the heap grow to twice what is
// live before it collects; with it, the collector runs whenever the heap
// passes it, and cannot take it under what is live). 100 callers post
// 1 MiB /json bodies for 2 s, then 4 connections of 500 streams each send
// 1 MiB requests for 4 s, on loopback, and the process's peak resident
// memory (VmHWM) above the baseline it had before must stay under the
// bound of /json requests after the first, and under the bound of both
// after the second. With the bounds, in our runs: 25 to 27 MiB, then 380
// to 384 MiB (bounds 50 and 630 MiB); on the code before them: 134 to
// 140 MiB, then 1,391 to 1,650 MiB. A small request on a connection of
// its own is still answered during the gRPC flood. Not under the race
// detector, whose shadow memory is several times the heap's.
func TestRequestMemoryIsBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is several times the heap's")
	}
	if testing.Short() {
		t.Skip("a 6 s flood of 1 MiB requests")
	}
	const conns, streams, grpcFlood, posters, jsonFlood = 4, 500, 4 * time.Second, 100, 2 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^TestRequestMemoryChild$")
	bound := int64(rls.MaxGRPCRequestMemory + rls.MaxJSONRequestMemory)
	const baselineAllowance = 64 << 20 // the baseline measured is 21 MiB
	// GOMEMLIMIT under the bound: the collector runs whenever the heap
	// passes it, so that the resident size follows what is live.
	cmd.Env = append(os.Environ(), memoryChild+"=1", "GOMEMLIMIT=384MiB")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the service: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the service printed no address: %v", err)
	}
	var target, url string
	if _, err := fmt.Sscan(line, &target, &url); err != nil {
		t.Fatalf("the service printed %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout)

	dial := func() *grpc.ClientConn {
		c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(2<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice := rlsv3.NewRateLimitServiceClient(dial())
	small := req("flood", desc("user=alice"))
	if _, err := alice.ShouldRateLimit(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	big := make([]*commonv3.RateLimitDescriptor, 256)
	for i := range big {
		big[i] = desc(fmt.Sprintf("v=%d-%s", i, strings.Repeat("x", 4000)))
	}
	encoded, err := proto.Marshal(req("flood", big...))
	if err != nil {
		t.Fatal(err)
	}
	body, err := protojson.Marshal(req("flood", big...))
	if err != nil {
		t.Fatal(err)
	}
	if len(encoded) < 1_000_000 || len(body) > rls.MaxMessageSize {
		t.Fatalf("requests of %d and %d bytes, want about 1 MiB", len(encoded), len(body))
	}
	baseline := procStatus(t, cmd.Process.Pid, "VmRSS")
	if baseline > baselineAllowance {
		t.Fatalf("the service's baseline is %d MiB, over the %d MiB allowed for it", baseline>>20, baselineAllowance>>20)
	}

	var sent, refused, posted, busy atomic.Int64
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: posters}}
	t.Cleanup(hc.CloseIdleConnections)
	post := func(ctx context.Context) {
		for ctx.Err() == nil {
			r, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			r.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(r)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			posted.Add(1)
			if res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") != "" {
				busy.Add(1)
			}
		}
	}
	preEncoded := grpc.ForceCodec(encodedCodec(encoded))
	send := func(ctx context.Context, c rlsv3.RateLimitServiceClient) {
		for ctx.Err() == nil {
			_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}, preEncoded)
			sent.Add(1)
			if status.Code(err) == codes.ResourceExhausted {
				refused.Add(1)
			}
		}
	}

	// The /json flood first: the heap that the gRPC flood grows is not
	// given back to the system at once.
	ctx, stop := context.WithTimeout(context.Background(), jsonFlood)
	var wg sync.WaitGroup
	for range posters {
		wg.Go(func() { post(ctx) })
	}
	wg.Wait()
	stop()
	jsonPeak := procStatus(t, cmd.Process.Pid, "VmHWM")

	ctx, stop = context.WithTimeout(context.Background(), grpcFlood)
	defer stop()
	for range conns {
		c := rlsv3.NewRateLimitServiceClient(dial())
		for range streams {
			wg.Go(func() { send(ctx, c) })
		}
	}
	var aliceErr error
	wg.Go(func() {
		time.Sleep(grpcFlood / 2)
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, aliceErr = alice.ShouldRateLimit(cctx, small)
	})
	wg.Wait()
	peak := procStatus(t, cmd.Process.Pid, "VmHWM")
	t.Logf("%d /json (%d busy), then %d gRPC requests (%d refused); resident memory %d MiB before, peak %d MiB after the /json flood (bound %d MiB above the baseline), %d MiB after the gRPC flood (bound %d MiB)",
		posted.Load(), busy.Load(), sent.Load(), refused.Load(), baseline>>20, jsonPeak>>20, rls.MaxJSONRequestMemory>>20, peak>>20, bound>>20)
	if jsonPeak-baseline > rls.MaxJSONRequestMemory {
		t.Errorf("peak resident memory %d MiB above the baseline (%d MiB) under the /json flood, want at most %d MiB", (jsonPeak-baseline)>>20, baseline>>20, rls.MaxJSONRequestMemory>>20)
	}
	if peak-baseline > bound {
		t.Errorf("peak resident memory %d MiB above the baseline (%d MiB), want at most %d MiB", (peak-baseline)>>20, baseline>>20, bound>>20)
	}
	if aliceErr != nil {
		t.Errorf("a small request during the flood: %v", aliceErr)
	}
	if refused.Load() == 0 || busy.Load() == 0 {
		t.Errorf("%d gRPC requests refused and %d /json bodies answered busy, want some of each: the flood did not reach the bound", refused.Load(), busy.Load())
	}
}

// procStatus returns the field (VmRSS, VmHWM) of process pid's
// /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
