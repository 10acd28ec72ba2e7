package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestPolicyOfTheLimitsChecked: RateLimit-Policy and RateLimit list only
// the limits that checked the request, in the route's order; a limit
// skipped for a missing key is in neither.
func TestPolicyOfTheLimitsChecked(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Name: "mixed", Limits: []httplimit.Limit{
		{Rule: rule(t, "ip", 10, time.Minute), Key: httplimit.ClientIP(nil)},
		{Rule: rule(t, "user", 5, time.Minute), Key: httplimit.Principal},
		{Rule: rule(t, "tenant", 3, time.Hour), Key: httplimit.Header("X-Tenant")},
	}})
	send := func(user, tenant string) http.Header {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:1"
		if user != "" {
			req = req.WithContext(httplimit.WithPrincipal(req.Context(), user))
		}
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("got %d, want 200", rec.Code)
		}
		return rec.Header()
	}
	for _, tc := range []struct {
		user, tenant      string
		policy, rateLimit string
	}{
		{"u", "t", `"ip";q=10;w=60, "user";q=5;w=60, "tenant";q=3;w=3600`, `"ip";r=9;t=60, "user";r=4;t=60, "tenant";r=2;t=3600`},
		{"", "t", `"ip";q=10;w=60, "tenant";q=3;w=3600`, `"ip";r=8;t=60, "tenant";r=1;t=3600`},
		{"u", "", `"ip";q=10;w=60, "user";q=5;w=60`, `"ip";r=7;t=60, "user";r=3;t=60`},
		{"", "", `"ip";q=10;w=60`, `"ip";r=6;t=60`},
	} {
		hd := send(tc.user, tc.tenant)
		if got := hd.Get("RateLimit-Policy"); got != tc.policy {
			t.Errorf("user %q tenant %q: RateLimit-Policy = %s; want %s", tc.user, tc.tenant, got, tc.policy)
		}
		if got := hd.Get("RateLimit"); got != tc.rateLimit {
			t.Errorf("user %q tenant %q: RateLimit = %s; want %s", tc.user, tc.tenant, got, tc.rateLimit)
		}
	}
}

// TestHeaderKey: Header keys by the first line of the header, "" when it is
// absent or empty, whatever the case of the name.
func TestHeaderKey(t *testing.T) {
	key := httplimit.Header("x-api-key")
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if k := key(req); k != "" {
		t.Fatalf("absent header: key %q, want none", k)
	}
	req.Header["X-Api-Key"] = []string{}
	if k := key(req); k != "" {
		t.Fatalf("header without lines: key %q, want none", k)
	}
	req.Header.Add("X-Api-Key", "")
	if k := key(req); k != "" {
		t.Fatalf("empty header: key %q, want none", k)
	}
	req.Header.Del("X-Api-Key")
	req.Header.Add("X-API-KEY", "k1")
	req.Header.Add("X-Api-Key", "k2")
	if k := key(req); k != "k1" {
		t.Fatalf("key %q, want the first line, k1", k)
	}
}

// TestThrottleRecoversAfterRejecting: a request turned away because
// MaxWaiters were already waiting leaves the count as it was, so the route
// throttles again once the waiters are done.
func TestThrottleRecoversAfterRejecting(t *testing.T) {
	const window = 300 * time.Millisecond
	e, h := throttled(t, window, 5*time.Second, 1)
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	done := make(chan int)
	go func() { done <- do(h, "192.0.2.1:1").Code }()
	waitFor(t, "a waiting request", func() bool { return metric(t, e.reg, "floodgate_throttle_waiting", nil) == 1 })
	for range 2 {
		if rec := do(h, "192.0.2.1:1"); rec.Code != 429 {
			t.Fatalf("over the waiter bound: %d, want 429", rec.Code)
		}
	}
	if code := <-done; code != 200 {
		t.Fatalf("the waiting request got %d, want 200", code)
	}
	if got := metric(t, e.reg, "floodgate_throttle_waiting", nil); got != 0 {
		t.Fatalf("waiting = %v after the wait ended", got)
	}
	// The key is full again: the next request must wait, not be rejected.
	start := time.Now()
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatalf("after the waiter left: %d, want 200 after a wait (the waiter count leaked)", rec.Code)
	}
	if took := time.Since(start); took < window/2 {
		t.Errorf("the request took %v; it should have waited for the window", took)
	}
	for result, want := range map[string]float64{"rejected": 2, "allowed": 2} {
		if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": result}); got != want {
			t.Errorf("throttled{result=%s} = %v, want %v", result, got, want)
		}
	}
}

// TestThrottleLocalDenials: while the store fails, a FailLocal route
// throttles the local limits' denials as it would the store's.
func TestThrottleLocalDenials(t *testing.T) {
	const window = 200 * time.Millisecond
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	e := newEnv(t, envOptions{store: ms})
	h := e.handler(t, httplimit.Route{Name: "slow", MaxDelay: 5 * time.Second, Failure: enforce.FailLocal,
		Limits: []httplimit.Limit{{Rule: rule(t, "slow", 1, window), Key: httplimit.ClientIP(nil)}}})
	e.fault.Set(faultstore.Fail)
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatalf("first request, decided locally: %d", rec.Code)
	}
	start := time.Now()
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatalf("second request: %d, want 200 after waiting for the local limit", rec.Code)
	}
	if took := time.Since(start); took < window/2 {
		t.Errorf("the locally denied request took %v; it should have waited about %v", took, window)
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": "allowed"}); got != 1 {
		t.Errorf("throttled{result=allowed} = %v, want 1", got)
	}
	if got := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "local"}); got != 2 {
		t.Errorf("decisions{outcome=local} = %v, want 2", got)
	}

	// A failed-closed route has no decision to wait for.
	closed := e.handler(t, httplimit.Route{Name: "closed", MaxDelay: 5 * time.Second, Failure: enforce.FailClosed,
		Limits: []httplimit.Limit{{Rule: rule(t, "closed", 1, window), Key: httplimit.ClientIP(nil)}}})
	start = time.Now()
	if rec := do(closed, "192.0.2.1:1"); rec.Code != 429 || time.Since(start) > slack {
		t.Fatalf("fail-closed route: %d after %v, want an immediate 429", rec.Code, time.Since(start))
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", nil); got != 1 {
		t.Errorf("throttled = %v, want 1: the fail-closed denial must not wait", got)
	}
}

// TestOpaqueFailClosedStatus: an opaque route answers a denial with Status
// and a fail-closed request with FailStatus, each with Retry-After only
// when it is 429 or 503, and the same body otherwise.
func TestOpaqueFailClosedStatus(t *testing.T) {
	for _, tc := range []struct {
		status, failStatus     int
		wantDenied, wantFailed int
	}{
		{0, http.StatusServiceUnavailable, 429, 503},
		{http.StatusForbidden, 0, 403, 429},
	} {
		e := newEnv(t, envOptions{})
		h := e.handler(t, httplimit.Route{Name: "login", Opaque: true, Failure: enforce.FailClosed,
			Status: tc.status, FailStatus: tc.failStatus,
			Limits: []httplimit.Limit{{Rule: rule(t, "ip", 1, 90*time.Second), Key: httplimit.ClientIP(nil)}}})
		if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
			t.Fatalf("first request: %d", rec.Code)
		}
		check := func(what string, rec *httptest.ResponseRecorder, want int) {
			t.Helper()
			if rec.Code != want {
				t.Fatalf("%s: %d, want %d", what, rec.Code, want)
			}
			retry := ""
			if want == 429 || want == 503 {
				retry = "90"
			}
			if got := rec.Header().Get("Retry-After"); got != retry {
				t.Errorf("%s: Retry-After %q, want %q", what, got, retry)
			}
			wantBody := `{"type":"` + httplimit.QuotaExceeded + `","title":"Request cannot be satisfied as assigned quota has been exceeded","status":` +
				strconv.Itoa(want) + `,"detail":"Too many requests. Try again later.","violated-policies":["login"]}`
			if got := rec.Body.String(); got != wantBody {
				t.Errorf("%s: body %s, want %s", what, got, wantBody)
			}
		}
		check("denied", do(h, "192.0.2.1:1"), tc.wantDenied)
		e.fault.Set(faultstore.Fail)
		check("failed closed", do(h, "192.0.2.1:1"), tc.wantFailed)
	}
}

// TestRouteBounds: a route's name may be 128 bytes and its statuses any of
// 400 to 599; one step past is refused.
func TestRouteBounds(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := rule(t, "r", 1, time.Minute)
	lims := []httplimit.Limit{{Rule: r, Key: httplimit.Principal}}
	for _, tc := range []struct {
		name  string
		route httplimit.Route
		valid bool
	}{
		{"name of 128 bytes", httplimit.Route{Name: strings.Repeat("n", 128), Limits: lims}, true},
		{"name of 129 bytes", httplimit.Route{Name: strings.Repeat("n", 129), Limits: lims}, false},
		{"status 400", httplimit.Route{Status: 400, Limits: lims}, true},
		{"status 399", httplimit.Route{Status: 399, Limits: lims}, false},
		{"status 599", httplimit.Route{Status: 599, Limits: lims}, true},
		{"status 600", httplimit.Route{Status: 600, Limits: lims}, false},
		{"fail status 400", httplimit.Route{FailStatus: 400, Limits: lims}, true},
		{"fail status 399", httplimit.Route{FailStatus: 399, Limits: lims}, false},
		{"fail status 599", httplimit.Route{FailStatus: 599, Limits: lims}, true},
		{"fail status 600", httplimit.Route{FailStatus: 600, Limits: lims}, false},
	} {
		_, err := e.hl.Middleware(tc.route)
		if tc.valid && err != nil {
			t.Errorf("%s: %v; want valid", tc.name, err)
		}
		if !tc.valid && !errors.Is(err, httplimit.ErrInvalidOptions) {
			t.Errorf("%s: err = %v; want ErrInvalidOptions", tc.name, err)
		}
	}
}

// denyOnce denies the first Take with RetryAfter retry and allows the
// rest. It embeds the Store interface so that it declares only Take.
type denyOnce struct {
	floodgate.Store
	retry time.Duration
	takes atomic.Int64
}

func (s *denyOnce) Take(_ context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	rs := make([]floodgate.Result, len(hits))
	for i := range rs {
		if s.takes.Add(1) == 1 {
			rs[i] = floodgate.Result{RetryAfter: s.retry, ResetAfter: s.retry}
		} else {
			rs[i] = floodgate.Result{Allowed: true, ResetAfter: time.Minute}
		}
	}
	return rs, nil
}

// TestThrottleAtMaxDelay: a denial whose RetryAfter equals MaxDelay is
// waited for (the bound is inclusive); one just past it is not.
func TestThrottleAtMaxDelay(t *testing.T) {
	const delay = 40 * time.Millisecond
	for _, tc := range []struct {
		maxDelay time.Duration
		want     int
	}{
		{delay, 200},
		{delay - time.Microsecond, 429},
	} {
		e := newEnv(t, envOptions{store: &denyOnce{retry: delay}, bare: true})
		h := e.handler(t, httplimit.Route{Name: "slow", MaxDelay: tc.maxDelay,
			Limits: []httplimit.Limit{{Rule: rule(t, "slow", 1, time.Minute), Key: httplimit.ClientIP(nil)}}})
		start := time.Now()
		rec := do(h, "192.0.2.1:1")
		if rec.Code != tc.want {
			t.Fatalf("MaxDelay %v, RetryAfter %v: %d, want %d", tc.maxDelay, delay, rec.Code, tc.want)
		}
		if took := time.Since(start); tc.want == 200 && took < delay {
			t.Errorf("answered after %v; want a wait of %v", took, delay)
		}
	}
}

// TestDecisionMetricsNameThePolicy: a decision a limiter made is counted
// under the policy it reports; one no limiter made, under policy "".
func TestDecisionMetricsNameThePolicy(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Name: "api", Failure: enforce.FailOpen,
		Limits: []httplimit.Limit{{Rule: rule(t, "ip", 1, time.Minute), Key: httplimit.ClientIP(nil)}}})
	do(h, "192.0.2.1:1")
	do(h, "192.0.2.1:1")
	e.fault.Set(faultstore.Fail)
	do(h, "192.0.2.1:1")
	for _, tc := range []struct {
		policy, outcome string
		want            float64
	}{
		{"ip", "allowed", 1}, {"ip", "denied", 1}, {"", "failed_open", 1},
		{"", "allowed", 0}, {"", "denied", 0}, {"ip", "failed_open", 0},
	} {
		labels := map[string]string{"gate": "api", "policy": tc.policy, "outcome": tc.outcome}
		if got := metric(t, e.reg, "floodgate_decisions_total", labels); got != tc.want {
			t.Errorf("decisions%v = %v, want %v", labels, got, tc.want)
		}
	}
}

// TestOutcomeString names the outcomes, and "unknown" past the last.
func TestOutcomeString(t *testing.T) {
	for o, want := range map[enforce.Outcome]string{enforce.Allowed: "allowed", enforce.Skipped: "skipped", enforce.Skipped + 1: "error", enforce.Skipped + 2: "unknown", 255: "unknown"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q; want %q", uint8(o), got, want)
		}
	}
}

// TestKeyAtMaxKeyLen: a key of exactly bounds.KeyLen bytes is used
// as it is; only a longer one is replaced by its digest.
func TestKeyAtMaxKeyLen(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := rule(t, "key", 5, time.Minute)
	h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{{Rule: r, Key: httplimit.Header("X-Key")}}})
	key := strings.Repeat("k", bounds.KeyLen)
	if rec := do(h, "192.0.2.1:1", "X-Key", key); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	d, err := e.lim.Peek(context.Background(), floodgate.Hit{Rule: r, Key: key})
	if err != nil || d.Remaining != 3 {
		t.Fatalf("Peek of the raw key = %+v, %v; want the request counted under it (3 left after one more)", d, err)
	}
}
