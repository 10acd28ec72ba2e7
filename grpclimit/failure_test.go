package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// slack is what a decision may take beyond its budget on a loaded test
// machine under the race detector (httplimit's TestRedisOutage saw 687ms
// with another test process on the 2 cores). The faults the tests catch
// wait a second or more: a hung store, a budget waited out twice.
const slack = 900 * time.Millisecond

// modes limits EmptyCall fail-closed, UnaryCall fail-open and
// StreamingOutputCall fail-local, each to 2 per minute per client IP.
func modes(t *testing.T) grpclimit.Options {
	m := func(f enforce.FailureMode) grpclimit.Method {
		return grpclimit.Method{Failure: f, Limits: []grpclimit.Limit{
			{Rule: rule(t, "r-"+f.String(), 2, time.Minute), Key: grpclimit.ClientIP(nil)}}}
	}
	return grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall:  m(enforce.FailClosed),
		unaryCall:  m(enforce.FailOpen),
		streamCall: m(enforce.FailLocal),
	}}
}

// calls makes one call of each failure mode's method.
func calls(t *testing.T, c testpb.TestServiceClient) map[enforce.FailureMode]answer {
	t.Helper()
	ctx := context.Background()
	out := map[enforce.FailureMode]answer{enforce.FailClosed: empty(t, c, ctx)}
	var h metadata.MD
	_, err := c.UnaryCall(ctx, new(testpb.SimpleRequest), grpcHeader(&h))
	out[enforce.FailOpen] = newAnswer(err, h)
	st, err := c.StreamingOutputCall(ctx, new(testpb.StreamingOutputCallRequest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = st.Recv(); errors.Is(err, io.EOF) {
		err = nil
	}
	h, _ = st.Header()
	out[enforce.FailLocal] = newAnswer(err, h)
	return out
}

func TestFailureModes(t *testing.T) {
	const budget = 20 * time.Millisecond
	for _, fault := range []faultstore.Mode{faultstore.Fail, faultstore.Hang} {
		t.Run(map[faultstore.Mode]string{faultstore.Fail: "failing store", faultstore.Hang: "hung store"}[fault], func(t *testing.T) {
			e := newEnv(t, envOptions{timeout: budget})
			c, svc := e.serve(t, modes(t))
			for m, a := range calls(t, c) { // the store's counts: 1 each
				if a.err != nil {
					t.Fatalf("%v method, store up: %v", m, a.err)
				}
			}
			e.fault.Set(fault)
			degraded := time.Now()
			var worst time.Duration
			for i := range 4 {
				start := time.Now()
				got := calls(t, c)
				worst = max(worst, time.Since(start)/3)

				closed := got[enforce.FailClosed]
				if closed.st.Code() != codes.Unavailable || closed.retry != grpclimit.MinFailRetryAfter {
					t.Fatalf("closed method, degraded call %d: %v, RetryInfo %v; want Unavailable, %v", i+1, closed.err, closed.retry, grpclimit.MinFailRetryAfter)
				}
				if want := "the rate limit could not be checked; retry after 5 s"; closed.st.Message() != want || closed.nquota != 0 {
					t.Errorf("closed method: message %q with %d QuotaFailures, want %q and none", closed.st.Message(), closed.nquota, want)
				}
				if open := got[enforce.FailOpen]; open.err != nil {
					t.Fatalf("open method, degraded call %d: %v", i+1, open.err)
				}
				if r := svc.last(t); r.res.Outcome != enforce.FailedOpen && i == 3 {
					t.Errorf("the open method's handler found %v", r.res.Outcome)
				}
				// The local limits start from zero: 2 per minute.
				local := got[enforce.FailLocal]
				wantCode, wantField := codes.OK, []string{`"r-local";r=1;t=60`, `"r-local";r=0;t=60`}[min(i, 1)]
				if i >= 2 {
					wantCode = codes.ResourceExhausted
				}
				if local.st.Code() != wantCode || local.field(t, grpclimit.MetadataRateLimit) != wantField {
					t.Errorf("local method, degraded call %d: %v, ratelimit %q; want %v, %q", i+1, local.err,
						local.field(t, grpclimit.MetadataRateLimit), wantCode, wantField)
				}
				// The local limits run on the real clock: the wait is the
				// window less the time since the first local call.
				if i >= 2 && (local.retry > time.Minute || local.retry < time.Minute-time.Since(degraded)) {
					t.Errorf("local denial's RetryInfo %v, want within %v of 1m0s", local.retry, time.Since(degraded))
				}
				for m, a := range got {
					if m != enforce.FailLocal && len(a.header.Get(grpclimit.MetadataRateLimit)) != 0 {
						t.Errorf("%v method sent rate-limit metadata %v though no limiter decided", m, a.header)
					}
				}
			}
			if worst > budget+slack {
				t.Errorf("a degraded call took %v; the budget is %v", worst, budget)
			}
			for outcome, want := range map[string]float64{"failed_closed": 4, "failed_open": 4, "local": 4, "allowed": 3} {
				if got := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": outcome}); got != want {
					t.Errorf("decisions{outcome=%s} = %v, want %v", outcome, got, want)
				}
			}
			reason := map[faultstore.Mode]string{faultstore.Fail: "error", faultstore.Hang: "timeout"}[fault]
			if got := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"gate": emptyCall, "reason": reason}); got != 4 {
				t.Errorf("store_errors{gate=EmptyCall,reason=%s} = %v, want 4", reason, got)
			}
			if !strings.Contains(e.logs.String(), "gate="+emptyCall) {
				t.Errorf("the degraded decisions of EmptyCall were not logged: %q", e.logs)
			}

			// Back: the store decides again, from its own counts.
			e.fault.Set(faultstore.Pass)
			for m, a := range calls(t, c) {
				if a.err != nil {
					t.Fatalf("%v method after recovery: %v", m, a.err)
				}
				if got, want := a.field(t, grpclimit.MetadataRateLimit), `"r-`+m.String()+`";r=0;t=60`; got != want {
					t.Errorf("%v method after recovery: ratelimit %q, want %q", m, got, want)
				}
			}
		})
	}
}

// A fail-closed call asks the client to wait for the breaker's remaining
// open time when that is longer than MinFailRetryAfter.
func TestFailClosedWaitsForTheBreaker(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	fault := faultstore.New(ms)
	const cooldown = 30 * time.Second
	bs, err := breakerstore.New(fault, breakerstore.Options{Failures: 1, Cooldown: cooldown})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{store: bs, opts: enforce.Options{Breaker: bs}})
	c, _ := e.serve(t, modes(t))
	fault.Set(faultstore.Fail)
	first := empty(t, c, context.Background()) // trips the breaker
	opened := time.Now()
	second := empty(t, c, context.Background())
	if first.st.Code() != codes.Unavailable || second.st.Code() != codes.Unavailable {
		t.Fatalf("fail-closed calls: %v, %v", first.err, second.err)
	}
	if second.retry > cooldown || second.retry < cooldown-time.Since(opened)-slack {
		t.Errorf("RetryInfo %v with the breaker open for %v more; want about %v", second.retry, cooldown, cooldown)
	}
	if got := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"gate": emptyCall, "reason": "breaker_open"}); got != 1 {
		t.Errorf("store_errors{reason=breaker_open} = %v, want 1", got)
	}
	if got := metric(t, e.reg, "floodgate_breaker_state", nil); got != 2 {
		t.Errorf("floodgate_breaker_state = %v, want 2 (open)", got)
	}
}

// A client that gives up while the store hangs gets its own deadline's
// status, and nothing is counted as a decision.
func TestClientDeadlineIsNotAFailure(t *testing.T) {
	e := newEnv(t, envOptions{timeout: 2 * time.Second}) // a budget waited out would show past slack
	c, svc := e.serve(t, modes(t))
	e.fault.Set(faultstore.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	a := empty(t, c, ctx)
	if a.st.Code() != codes.DeadlineExceeded {
		t.Errorf("%v, want DeadlineExceeded", a.err)
	}
	if d := time.Since(start); d > 30*time.Millisecond+slack {
		t.Errorf("took %v after a 30ms deadline", d)
	}
	// The server sees the deadline too; give its interceptor the moment
	// it needs to return.
	deadline := time.Now().Add(time.Second)
	for metric(t, e.reg, "floodgate_store_duration_seconds", nil) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := metric(t, e.reg, "floodgate_decisions_total", nil) + metric(t, e.reg, "floodgate_store_errors_total", nil); n != 0 {
		t.Errorf("counted %v decisions or store errors for a call the client gave up", n)
	}
	if svc.calls() != 0 {
		t.Errorf("the handler ran")
	}
}

// An opaque fail-closed method answers a store failure as any other:
// Unavailable with RetryInfo, no metadata, no QuotaFailure.
func TestOpaqueFailClosed(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Opaque: true, Failure: enforce.FailClosed, Limits: []grpclimit.Limit{
			{Rule: rule(t, "login", 1, time.Hour), Key: grpclimit.ClientIP(nil)}}},
	}})
	e.fault.Set(faultstore.Fail)
	a := empty(t, c, context.Background())
	if a.st.Code() != codes.Unavailable || a.retry != grpclimit.MinFailRetryAfter || a.nquota != 0 || len(a.header.Get(grpclimit.MetadataRateLimit)) != 0 {
		t.Errorf("%v, RetryInfo %v, %d QuotaFailures, metadata %v; want Unavailable, 5s, none, none", a.err, a.retry, a.nquota, a.header)
	}
}

// A method with MaxDelay waits for quota instead of denying at once.
func TestThrottle(t *testing.T) {
	ms := memstore.New(memstore.Options{}) // the real clock: the wait is real
	defer ms.Close()
	e := newEnv(t, envOptions{store: ms})
	const window = 100 * time.Millisecond
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {MaxDelay: time.Second, Limits: []grpclimit.Limit{{Rule: rule(t, "slow", 1, window), Key: grpclimit.ClientIP(nil)}}},
	}})
	if a := empty(t, c, context.Background()); a.err != nil {
		t.Fatal(a.err)
	}
	start := time.Now()
	if a := empty(t, c, context.Background()); a.err != nil {
		t.Fatalf("throttled call: %v", a.err)
	}
	if d := time.Since(start); d < window/2 {
		t.Errorf("the second call took %v: it cannot have waited for the window of %v", d, window)
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"gate": emptyCall, "result": "allowed"}); got != 1 {
		t.Errorf("throttled{result=allowed} = %v, want 1", got)
	}
}

// A throttled method does not wait past the call's deadline: a call whose
// deadline comes before the quota gets ResourceExhausted with the real
// wait at once, not DeadlineExceeded after waiting for nothing.
func TestThrottleHonoursTheCallDeadline(t *testing.T) {
	ms := memstore.New(memstore.Options{}) // the real clock: the wait is real
	defer ms.Close()
	e := newEnv(t, envOptions{store: ms})
	const window = 10 * time.Second
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {MaxDelay: time.Minute, Limits: []grpclimit.Limit{{Rule: rule(t, "slow", 1, window), Key: grpclimit.ClientIP(nil)}}},
	}})
	if a := empty(t, c, context.Background()); a.err != nil {
		t.Fatal(a.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	a := empty(t, c, ctx)
	if took := time.Since(start); a.st.Code() != codes.ResourceExhausted || a.retry <= time.Second || a.retry > window || took >= time.Second {
		t.Errorf("call with a 1s deadline: %v, RetryInfo %v, after %v; want ResourceExhausted at once, with the wait of about %v", a.err, a.retry, took, window)
	}
}
