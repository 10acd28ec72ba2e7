package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// slack is what a decision may take beyond its budget on a loaded test
// machine under the race detector: a decision of TestRedisOutage took
// 687ms with another test process on the 2 cores. The faults the tests
// catch wait for a second or more (a hung store, a missing budget, a
// throttled wait).
const slack = 900 * time.Millisecond

// modes builds one handler per failure mode, each limited to 2 per minute
// per client IP.
func modes(t *testing.T, e *env) map[enforce.FailureMode]http.Handler {
	hs := map[enforce.FailureMode]http.Handler{}
	for _, m := range []enforce.FailureMode{enforce.FailClosed, enforce.FailOpen, enforce.FailLocal} {
		hs[m] = e.handler(t, httplimit.Route{Name: m.String(), Failure: m,
			Limits: []httplimit.Limit{{Rule: rule(t, "r-"+m.String(), 2, time.Minute), Key: httplimit.ClientIP(nil)}}})
	}
	return hs
}

func TestFailureModes(t *testing.T) {
	const budget = 20 * time.Millisecond
	for _, fault := range []faultstore.Mode{faultstore.Fail, faultstore.Hang} {
		t.Run(map[faultstore.Mode]string{faultstore.Fail: "failing store", faultstore.Hang: "hung store"}[fault], func(t *testing.T) {
			e := newEnv(t, envOptions{timeout: budget})
			hs := modes(t, e)
			// One request each while the store works: the store's counts.
			for _, h := range hs {
				if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
					t.Fatalf("store up: %d", rec.Code)
				}
			}
			e.fault.Set(fault)
			var worst time.Duration
			for i := range 4 {
				for m, h := range hs {
					start := time.Now()
					rec := do(h, "192.0.2.1:1")
					worst = max(worst, time.Since(start))
					want := map[enforce.FailureMode]int{enforce.FailClosed: 429, enforce.FailOpen: 200, enforce.FailLocal: 200}[m]
					if m == enforce.FailLocal && i >= 2 {
						want = 429 // the local limits start from zero: 2 per minute
					}
					if rec.Code != want {
						t.Fatalf("%v route, degraded request %d: %d, want %d", m, i+1, rec.Code, want)
					}
					if m == enforce.FailLocal {
						wantList(t, rec.Header(), "RateLimit", fmt.Sprintf("r-local;r=%d;t=60", max(0, 1-i)))
					}
				}
			}
			if worst > budget+slack {
				t.Errorf("a degraded decision took %v; the budget is %v", worst, budget)
			}
			t.Logf("worst degraded decision: %v (budget %v)", worst, budget)
			for outcome, want := range map[string]float64{"failed_closed": 4, "failed_open": 4, "local": 4, "allowed": 3} {
				if got := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": outcome}); got != want {
					t.Errorf("decisions{outcome=%s} = %v, want %v", outcome, got, want)
				}
			}
			reason := map[faultstore.Mode]string{faultstore.Fail: "error", faultstore.Hang: "timeout"}[fault]
			if got := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"gate": "closed", "reason": reason}); got != 4 {
				t.Errorf("store_errors{route=closed,reason=%s} = %v, want 4", reason, got)
			}

			// Back: the store decides again, from its own counts.
			e.fault.Set(faultstore.Pass)
			for m, h := range hs {
				rec := do(h, "192.0.2.1:1")
				if rec.Code != 200 {
					t.Fatalf("%v route after recovery: %d", m, rec.Code)
				}
				wantList(t, rec.Header(), "RateLimit", fmt.Sprintf("r-%v;r=0;t=60", m))
			}
		})
	}
}

// A client that goes away while the store hangs gets no answer, and its
// request is neither a degraded decision nor a store failure.
func TestClientGoneIsNotAFailure(t *testing.T) {
	e := newEnv(t, envOptions{timeout: 2 * time.Second}) // a budget waited out would show past slack
	h := modes(t, e)[enforce.FailClosed]
	e.fault.Set(faultstore.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:1"
	rec := &recorder{header: http.Header{}}
	start := time.Now()
	h.ServeHTTP(rec, req)
	if d := time.Since(start); d > 10*time.Millisecond+slack {
		t.Errorf("took %v after the client left", d)
	}
	if rec.code != 0 {
		t.Errorf("answered %d to a client that left", rec.code)
	}
	if n := metric(t, e.reg, "floodgate_store_errors_total", nil) + metric(t, e.reg, "floodgate_decisions_total", nil); n != 0 {
		t.Errorf("counted %v decisions or errors", n)
	}
	if e.logs.String() != "" {
		t.Errorf("logged %q", e.logs)
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// With a breaker in front of the store, a dead store stops being called
// after a few failures, and is taken back once it answers again.
func TestBreakerStopsCallingADeadStore(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	fault := faultstore.New(ms)
	bs, err := breakerstore.New(fault, breakerstore.Options{Failures: 3, Cooldown: 500 * time.Millisecond}) // longer than the 100 decisions below take on a slow machine: one probe at most
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{store: bs, breaker: bs})
	h := modes(t, e)[enforce.FailOpen]
	fault.Set(faultstore.Hang)
	for range 3 {
		do(h, "192.0.2.1:1")
	}
	calls := fault.Calls()
	var worst time.Duration
	for range 100 {
		start := time.Now()
		if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
			t.Fatalf("fail-open route: %d", rec.Code)
		}
		worst = max(worst, time.Since(start))
	}
	if n := fault.Calls() - calls; n > 1 {
		t.Errorf("the dead store was called %d times after the breaker opened; the breaker should let at most a probe through", n)
	}
	if got := metric(t, e.reg, "floodgate_breaker_state", nil); got != 2 && got != 1 {
		t.Errorf("floodgate_breaker_state = %v, want 2 (open) or 1 (half-open)", got)
	}
	if got := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"reason": "breaker_open"}); got < 90 {
		t.Errorf("store_errors{reason=breaker_open} = %v, want most of the 100", got)
	}
	t.Logf("worst decision with the breaker open: %v", worst)

	fault.Set(faultstore.Pass)
	deadline := time.Now().Add(5 * time.Second)
	for bs.State() != breakerstore.Closed {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %v after the store recovered", bs.State())
		}
		do(h, "192.0.2.1:1")
		time.Sleep(time.Millisecond)
	}
	if rec := do(h, "192.0.2.1:1"); rec.Header().Get("RateLimit") == "" {
		t.Fatalf("after recovery the store must decide again: %v", rec.Header())
	}
	if got := metric(t, e.reg, "floodgate_breaker_state", nil); got != 0 {
		t.Errorf("floodgate_breaker_state = %v, want 0 (closed)", got)
	}
}

// An outage writes a few lines that account for every degraded decision,
// never a line per request.
func TestDegradedDecisionsAreLoggedInAggregate(t *testing.T) {
	const interval = 5 * time.Second // enforce's, as its package doc states
	e := newEnv(t, envOptions{})
	hs := modes(t, e)
	e.fault.Set(faultstore.Fail)
	const n = 2000
	start := time.Now()
	for range n {
		do(hs[enforce.FailOpen], "192.0.2.1:1")
		do(hs[enforce.FailClosed], "192.0.2.1:1")
	}
	elapsed := time.Since(start)
	e.enf.Close() // writes what is held
	lines := strings.Split(strings.TrimSpace(e.logs.String()), "\n")
	counted := map[string]int{}
	re := regexp.MustCompile(`gate=(\w+) .*suppressed=(\d+)`)
	for _, line := range lines {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected log line %q", line)
		}
		k, _ := strconv.Atoi(m[2])
		counted[m[1]] += 1 + k
	}
	if counted["open"] != n || counted["closed"] != n {
		t.Errorf("log lines account for %v degraded decisions, want %d per route", counted, n)
	}
	if max := 2 * (int(elapsed/interval) + 2); len(lines) > max {
		t.Errorf("%d log lines for %d degraded decisions in %v; want at most one per route per %v (%d)", len(lines), 2*n, elapsed, interval, max)
	}
	t.Logf("%d degraded decisions in %v: %d log lines, e.g.\n%s", 2*n, elapsed, len(lines), lines[len(lines)-1])
}
