package rls_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
)

const outageConfig = `
domain: out
descriptors:
  - key: err
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: closed
    failure_mode: closed
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: open
    failure_mode: open
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: local
    failure_mode: local
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: free
    failure_mode: closed
    rate_limit: {unlimited: true}
`

// TestRedisOutage: with Redis frozen (SIGSTOP) and then killed, every
// descriptor takes its failure mode within the decision budget, and the
// service goes back to Redis when it returns, without a restart.
func TestRedisOutage(t *testing.T) {
	const budget = 50 * time.Millisecond
	// The race detector on a 2-core machine shared with other work
	// (httplimit's TestRedisOutage saw a 687ms decision so): generous,
	// and still short of envoyproxy/ratelimit's stall of seconds.
	const slack = 900 * time.Millisecond
	redis := redistest.Start(t)
	store := redisStore(t, redis.URL(), randomPrefix())
	br, err := breakerstore.New(store, breakerstore.Options{Failures: 3, Cooldown: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	svc := start(t, setup{yaml: outageConfig, store: br, timeout: budget, breaker: br})

	type outcome struct {
		code  codes.Code
		resp  rlsv3.RateLimitResponse_Code
		retry bool // a Retry-After header
	}
	call := func(ds ...string) (outcome, time.Duration) {
		r := req("out")
		for _, d := range ds {
			r.Descriptors = append(r.Descriptors, desc(d))
		}
		began := time.Now()
		resp, err := svc.client.ShouldRateLimit(context.Background(), r)
		took := time.Since(began)
		if err != nil {
			return outcome{code: status.Code(err)}, took
		}
		ra := header(resp, "Retry-After")
		if n, _ := strconv.Atoi(ra); ra != "" && n < 5 {
			t.Errorf("%v: a fail-closed Retry-After of %q, want at least 5", ds, ra)
		}
		return outcome{code: codes.OK, resp: resp.GetOverallCode(), retry: ra != ""}, took
	}
	healthy := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _ := call("err=x")
			if got == (outcome{code: codes.OK, resp: ok}) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the service is not back on Redis after 10s: %+v", what, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	healthy("at start")

	failures := map[string]outcome{
		"err=x":    {code: codes.Unavailable},
		"closed=x": {code: codes.OK, resp: over, retry: true},
		"open=x":   {code: codes.OK, resp: ok},
	}
	// local names the local descriptor's value: the instance's local
	// counts last across outages.
	outage := func(t *testing.T, local string) {
		var took []time.Duration
		localOK := 0
		for round := range 10 {
			for d, want := range failures {
				got, dt := call(d)
				took = append(took, dt)
				if got != want {
					t.Errorf("round %d, %s: %+v, want %+v", round, d, got, want)
				}
			}
			// Each descriptor of a request takes its mode: closed
			// beats error, error beats open.
			for _, c := range []struct {
				ds   []string
				want outcome
			}{
				{[]string{"open=x", "err=x"}, outcome{code: codes.Unavailable}},
				{[]string{"err=x", "closed=x"}, outcome{code: codes.OK, resp: over, retry: true}},
			} {
				got, dt := call(c.ds...)
				took = append(took, dt)
				if got != c.want {
					t.Errorf("round %d, %v: %+v, want %+v", round, c.ds, got, c.want)
				}
			}
			got, dt := call("local=" + local)
			took = append(took, dt)
			if got.code != codes.OK {
				t.Errorf("round %d, local: %+v", round, got)
			}
			if got.resp == ok {
				localOK++
			}
		}
		// The local limit (3 an hour) is counted by the instance alone
		// while Redis is away: 3 of the 10 rounds pass.
		if localOK != 3 {
			t.Errorf("local: %d of 10 allowed during the outage, want the local limit of 3", localOK)
		}
		slices.Sort(took)
		p99, worst := took[len(took)*99/100], took[len(took)-1]
		t.Logf("%d calls during the outage: p50 %v, p99 %v, max %v (budget %v)", len(took), took[len(took)/2], p99, worst, budget)
		if worst > budget+slack {
			t.Errorf("a call took %v during the outage, want at most the budget %v plus %v", worst, budget, slack)
		}
		// Once the breaker is open, calls fail at once: only the few that
		// opened it waited out the budget.
		if p50 := took[len(took)/2]; p50 > 10*time.Millisecond {
			t.Errorf("p50 %v during the outage: the breaker did not open", p50)
		}
	}

	t.Run("SIGSTOP", func(t *testing.T) {
		if err := redis.Stop(); err != nil {
			t.Fatal(err)
		}
		outage(t, "stopped")
		if err := redis.Cont(); err != nil {
			t.Fatal(err)
		}
		healthy("after SIGCONT")
	})
	t.Run("killed", func(t *testing.T) {
		redis.Kill()
		outage(t, "killed")
		if err := redis.Restart(); err != nil {
			t.Fatal(err)
		}
		healthy("after the restart")
	})
}

// TestPeekOutage: a request with a peek that the store cannot answer
// waits one budget, not one per store call, and each descriptor takes
// its failure mode.
func TestPeekOutage(t *testing.T) {
	const budget = 200 * time.Millisecond
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: outageConfig, store: fs, timeout: budget})
	fs.Set(faultstore.Hang)
	for _, c := range []struct {
		name string
		ds   []*commonv3.RateLimitDescriptor
		code codes.Code
		resp rlsv3.RateLimitResponse_Code
	}{
		{"open peek, closed count", []*commonv3.RateLimitDescriptor{peekDesc("open=p"), desc("closed=p")}, codes.OK, over},
		{"open peek, error count", []*commonv3.RateLimitDescriptor{peekDesc("open=p"), desc("err=p")}, codes.Unavailable, 0},
		{"open peek, open count", []*commonv3.RateLimitDescriptor{peekDesc("open=p"), desc("open=q")}, codes.OK, ok},
		{"error peek", []*commonv3.RateLimitDescriptor{peekDesc("err=p"), desc("open=q")}, codes.Unavailable, 0},
		{"closed peek", []*commonv3.RateLimitDescriptor{peekDesc("closed=p"), desc("open=q")}, codes.OK, over},
	} {
		began := time.Now()
		resp, err := svc.client.ShouldRateLimit(context.Background(), req("out", c.ds...))
		took := time.Since(began)
		if status.Code(err) != c.code || err == nil && resp.GetOverallCode() != c.resp {
			t.Errorf("%s: %v, %v; want %v %v", c.name, resp.GetOverallCode(), err, c.code, c.resp)
		}
		// Two budgets would take 2*budget at least: anything short of
		// that is one, whatever a loaded machine adds to it.
		if took < budget || took >= 2*budget {
			t.Errorf("%s: %v, want one budget of %v (not two)", c.name, took, budget)
		}
	}
}
