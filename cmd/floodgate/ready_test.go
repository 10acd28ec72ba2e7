package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestFreshReplicasFirstBurst is a rolling deploy under load: three
// freshly started service processes on one fresh redis-server, each
// waited for as a readiness probe waits (the gRPC health service SERVING),
// take a burst of 1,000 concurrent calls on one key limited to 100 a
// minute, for the fixed and the sliding window, each on a fresh set. Every
// call must be decided (no Unavailable, which Envoy's default
// failure_mode_deny: false passes unlimited) and exactly 100 admitted, and
// the burst must pay no first-use cost in Redis: no EVALSHA meets
// NOSCRIPT and no EVAL sends the 40 KB take script during the burst, since
// the service warmed its store up before it reported healthy (warm.go).
//
// The instances are separate processes built without the race detector,
// each with its own Redis client, and a decision budget of 1s, not the
// service's 50ms, which does not tell old from new on a 2-core machine
// beside other tests: this test's own client (1,000 concurrent gRPC calls
// under the race detector) starves the instances now and then, warm or
// not. At 50ms the code before the warm-up answered Unavailable in 2 of 31
// bursts (128 and 159 calls), the warmed-up code in 1 of 10 (169); the
// first-use cost itself is a few milliseconds here (the median store time
// of a fresh instance's first burst was 10.4ms before, 5.6ms warmed up,
// 6.4ms to 8.5ms in a second burst). What tells them apart in every run is
// Redis's count of script calls: before the warm-up, 1 to 3 EVALSHA met
// NOSCRIPT in each first burst, and as many EVAL sent the script.
// FLOODGATE_BURST_BUDGET=50ms sets another budget.
func TestFreshReplicasFirstBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and starts three instances twice")
	}
	budget := "1s"
	if b := os.Getenv("FLOODGATE_BURST_BUDGET"); b != "" {
		budget = b
	}
	bin := buildService(t)
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			redis := redistest.Start(t) // fresh: no script loaded
			dir := t.TempDir()
			conf := "domain: burst\nalgorithm: " + alg + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
			if err := os.WriteFile(filepath.Join(dir, "burst.yaml"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			var clients []rlsv3.RateLimitServiceClient
			for i := range 3 {
				p := startProcess(t, bin, map[string]string{"REDIS_URL": redis.URL(), "CONFIG_DIR": dir, "DECISION_TIMEOUT": budget})
				conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				waitServing(t, conn, fmt.Sprintf("instance %d", i+1), p)
				clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
			}
			before := scriptCalls(t, redis.Addr())

			const calls = 1000
			req := &rlsv3.RateLimitRequest{Domain: "burst", Descriptors: []*commonv3.RateLimitDescriptor{{
				Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
			}}}
			var (
				mu      sync.Mutex
				answers = map[string]int{}
				wg      sync.WaitGroup
				start   = make(chan struct{})
			)
			for i := range calls {
				wg.Go(func() {
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					resp, err := clients[i%len(clients)].ShouldRateLimit(ctx, req)
					what := resp.GetOverallCode().String()
					if err != nil {
						what = status.Code(err).String()
					}
					mu.Lock()
					answers[what]++
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
			after := scriptCalls(t, redis.Addr())
			t.Logf("budget %s: answers %v; during the burst, %d NOSCRIPT and %d EVAL", budget, answers, after.noscript-before.noscript, after.eval-before.eval)

			if want := map[string]int{"OK": 100, "OVER_LIMIT": calls - 100}; fmt.Sprint(answers) != fmt.Sprint(want) {
				t.Errorf("the first burst on fresh replicas answered %v, want %v", answers, want)
			}
			if n, e := after.noscript-before.noscript, after.eval-before.eval; n != 0 || e != 0 {
				t.Errorf("during the first burst on replicas reported healthy, %d EVALSHA met NOSCRIPT and %d EVAL sent the script; want none", n, e)
			}
		})
	}
}

// scripts are Redis's counts of script calls.
type scripts struct {
	noscript int // EVALSHA calls that failed: NOSCRIPT, here
	eval     int // EVAL calls
}

var (
	evalshaFailed = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,.*failed_calls=(\d+)`)
	evalCalls     = regexp.MustCompile(`cmdstat_eval:calls=(\d+)`)
)

func scriptCalls(t *testing.T, addr string) scripts {
	t.Helper()
	stats, err := redistest.Command(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	num := func(re *regexp.Regexp) int {
		m := re.FindStringSubmatch(stats)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return scripts{noscript: num(evalshaFailed), eval: num(evalCalls)}
}

// buildService builds the service without the race detector into a
// temporary directory and returns the binary's path.
func buildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "floodgate")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=") // no -race from the environment
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a service process started by startProcess.
type process struct {
	grpc, http string
	logs       *syncbuf.Buffer
}

// startProcess runs bin with the environment vars (listeners on free
// loopback ports, JSON logs) until the test ends, and returns once it
// logged that it serves.
func startProcess(t *testing.T, bin string, vars map[string]string) *process {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"GRPC_ADDR=127.0.0.1:0", "HTTP_ADDR=127.0.0.1:0", "LOG_FORMAT=json"}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{logs: &syncbuf.Buffer{}}
	serving := make(chan [2]string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "floodgate serving" {
				select {
				case serving <- [2]string{line.GRPC, line.HTTP}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { <-copied; done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the service did not stop within 15s:\n%s", p.logs.String())
		}
	})
	select {
	case a := <-serving:
		p.grpc, p.http = a[0], a[1]
	case <-copied:
		t.Fatalf("the service exited before serving:\n%s", p.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("the service did not serve within 20s:\n%s", p.logs.String())
	}
	return p
}

// waitServing waits until conn's health service answers SERVING for the
// rate-limit service, as a readiness probe does.
func waitServing(t *testing.T, conn *grpc.ClientConn, name string, p *process) {
	t.Helper()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if c := status.Code(err); err != nil && c != codes.Unavailable {
			t.Fatalf("%s: health check: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not SERVING within 20s (%v, %v):\n%s", name, res.GetStatus(), err, p.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeStartsDuringOutage: with Redis down at start, the service
// waits for the warm-up a bounded time, then serves all the same, healthy,
// deciding by the failure modes, as a running replica does in an outage;
// the warm-up goes on in the background and loads the scripts once Redis
// is back, before any call needs them.
func TestServeStartsDuringOutage(t *testing.T) {
	redis := redistest.Start(t)
	redis.Kill()
	dir := t.TempDir()
	conf := "domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, map[string]string{"REDIS_URL": redis.URL(), "CONFIG_DIR": dir})
	if logs := r.logs.String(); !strings.Contains(logs, "redis not warmed up at start: serving by the failure modes") {
		t.Errorf("no warning that the warm-up failed:\n%s", logs)
	}
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	res, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health during the outage: %v, %v; want SERVING (ready, deciding by the failure modes)", res.GetStatus(), err)
	}
	c := rlsv3.NewRateLimitServiceClient(conn)
	call := func() (*rlsv3.RateLimitResponse, error) {
		return c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
		}}})
	}
	if _, err := call(); status.Code(err) != codes.Unavailable {
		t.Errorf("a call during the outage: %v; want the default failure mode's Unavailable", err)
	}

	if err := redis.Restart(); err != nil {
		t.Fatal(err)
	}
	// The store sends take.lua after its prelude, ring.lua.
	var take []byte
	for _, f := range []string{"ring.lua", "take.lua"} {
		b, err := os.ReadFile("../../redisstore/" + f)
		if err != nil {
			t.Fatal(err)
		}
		take = append(take, b...)
	}
	sha := fmt.Sprintf("%x", sha1.Sum(take))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.logs.String(), "redis warmed up") {
		if time.Now().After(deadline) {
			t.Fatalf("not warmed up 10s after Redis came back:\n%s", r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Loaded by the warm-up: no call came since Redis is back.
	if exists, err := redistest.Command(redis.Addr(), "SCRIPT", "EXISTS", sha); err != nil || exists != "1" {
		t.Errorf("SCRIPT EXISTS take.lua once warmed up: %q, %v; want 1", exists, err)
	}
	if resp, err := call(); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("a call once Redis is back: %v, %v; want OK", resp, err)
	}
}
