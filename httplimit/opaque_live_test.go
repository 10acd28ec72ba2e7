package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// sourceFunc is an Overrides of a function.
type sourceFunc func(base floodgate.Rule, key string) (floodgate.Rule, bool)

func (f sourceFunc) Override(base floodgate.Rule, key string) (floodgate.Rule, bool) {
	return f(base, key)
}

// An opaque route's Retry-After bounds every limit's wait (its longest
// window), the rules a live source gives included: a source that moves a
// limit to an hourly window must not leave the answer saying a minute.
func TestOpaqueRetryAfterCoversALiveWindow(t *testing.T) {
	hourly := sourceFunc(func(base floodgate.Rule, _ string) (floodgate.Rule, bool) {
		base.Window = time.Hour
		return base, true
	})
	e := newEnv(t, envOptions{overrides: hourly})
	h := e.handler(t, httplimit.Route{Name: "login", Opaque: true, Limits: []httplimit.Limit{
		{Rule: rule(t, "opaque-live", 1, time.Minute), Key: httplimit.Header("X-Account")},
	}})
	if rec := do(h, "192.0.2.1:1", "X-Account", "a"); rec.Code != http.StatusOK {
		t.Fatalf("first request: %d", rec.Code)
	}
	e.clock.Advance(2 * time.Minute) // past the route's own window, well within the live one
	rec := do(h, "192.0.2.1:1", "X-Account", "a")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "3600" {
		t.Fatalf("second request under a live 1/hour rule: %d, Retry-After %q; want 429, Retry-After 3600 (the live window)",
			rec.Code, rec.Header().Get("Retry-After"))
	}
}

// A shadow limit never makes a client wait, so its window does not
// lengthen an opaque route's Retry-After: rolling out a daily limit in
// shadow mode must leave the real denials as they were.
func TestOpaqueRetryAfterIgnoresShadowLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Name: "login", Opaque: true, Limits: []httplimit.Limit{
		{Rule: rule(t, "opaque-real", 1, time.Minute), Key: httplimit.Header("X-Account")},
		{Rule: rule(t, "opaque-trial", 100, 24*time.Hour), Key: httplimit.Header("X-Account"), Shadow: true},
	}})
	do(h, "192.0.2.1:1", "X-Account", "a")
	rec := do(h, "192.0.2.1:1", "X-Account", "a")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("denial by the 1/min limit beside a daily shadow one: %d, Retry-After %q; want 429, 60",
			rec.Code, rec.Header().Get("Retry-After"))
	}
}

// An opaque route's fail-closed 429 asks for at least MinFailRetryAfter,
// as every fail-closed 429 does, even when its windows are shorter:
// during an outage, clients should not come back every second.
func TestOpaqueFailClosedWaitsAtLeastTheMinimum(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.handler(t, httplimit.Route{Name: "login", Opaque: true, Failure: enforce.FailClosed, Limits: []httplimit.Limit{
		{Rule: rule(t, "opaque-short", 1, time.Second), Key: httplimit.Header("X-Account")},
	}})
	e.fault.Set(faultstore.Fail)
	rec := do(h, "192.0.2.1:1", "X-Account", "a")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("opaque fail-closed denial with a 1s window: %d, Retry-After %q; want 429, 5 (MinFailRetryAfter)",
			rec.Code, rec.Header().Get("Retry-After"))
	}
}
