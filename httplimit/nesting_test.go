package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// An outer route that failed open counted nothing: a nested fail-closed
// route on the same limit must still check it, and fail closed, as it did
// before the enforcement layer (an outer failed check covers no hit).
func TestNestedFailClosedUnderAFailedOpenRoute(t *testing.T) {
	e := newEnv(t, envOptions{})
	ip := rule(t, "nest-fail-ip", 10, time.Minute)
	byIP := httplimit.Limit{Rule: ip, Key: httplimit.Header("X-IP")}
	outer, err := e.hl.Middleware(httplimit.Route{Name: "global", Failure: enforce.FailOpen, Limits: []httplimit.Limit{byIP}})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := e.hl.Middleware(httplimit.Route{Name: "login", Failure: enforce.FailClosed, Limits: []httplimit.Limit{byIP}})
	if err != nil {
		t.Fatal(err)
	}
	h := outer(inner(ok))
	e.fault.Set(faultstore.Fail)
	rec := do(h, "192.0.2.1:1", "X-IP", "192.0.2.9")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("store down, fail-open route around a fail-closed one on the same limit: %d, Retry-After %q; want 429 with Retry-After 5 (the inner route fails closed)",
			rec.Code, rec.Header().Get("Retry-After"))
	}
	if n := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"gate": "login", "outcome": "failed_closed"}); n != 1 {
		t.Fatalf("the login route counted %v failed_closed decisions, want 1", n)
	}
}
