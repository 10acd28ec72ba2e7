package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/scenario"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// processFleet is three bankapi processes on a real redis-server, behind
// the scenario's proxy.
type processFleet struct {
	redis *redistest.Server
	proxy string
	logs  *syncbuf.Buffer
}

func (f *processFleet) URL() string        { return f.proxy }
func (f *processFleet) CanStopRedis() bool { return true }
func (f *processFleet) StopRedis() error   { f.redis.Kill(); return nil }
func (f *processFleet) RestartRedis() error {
	return f.redis.Restart()
}
func (f *processFleet) Logs() string { return strings.TrimSpace(f.logs.Take()) }

// TestScenarioOnProcesses plays the seed's scenarios against three real
// bankapi processes sharing a real redis-server, which is killed
// (SIGKILL) and restarted mid-run.
func TestScenarioOnProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	redis := redistest.Start(t)
	bin := filepath.Join(t.TempDir(), "bankapi")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	logs := &syncbuf.Buffer{}
	var backends []*url.URL
	for i := range 3 {
		addr := freeAddr(t)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			"LISTEN_ADDR="+addr,
			"METRICS_ADDR=127.0.0.1:0",
			"REDIS_URL="+redis.URL(),
			"TOKEN_SECRET=e2e-secret-shared-by-the-three-replicas",
			"TRUSTED_PROXIES=127.0.0.1/32",
			"DECISION_TIMEOUT=300ms",
			"LOG_LEVEL=warn",
		)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("replica %d did not shut down cleanly: %v", i+1, err)
				}
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				t.Errorf("replica %d ignored SIGINT", i+1)
			}
		})
		waitReady(t, "http://"+addr+"/healthz")
		backends = append(backends, &url.URL{Scheme: "http", Host: addr})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &http.Server{Handler: scenario.Proxy(backends)}
	go proxy.Serve(ln)
	t.Cleanup(func() { proxy.Close() })

	var out bytes.Buffer
	err = scenario.Run(context.Background(), &processFleet{redis: redis, proxy: "http://" + ln.Addr().String(), logs: logs}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(t *testing.T, u string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("%s never answered", u)
}
