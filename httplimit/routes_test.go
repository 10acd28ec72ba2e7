package httplimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// newRoutes builds Routes on a fresh memory store, with the registry its
// metrics go to and the buffer its logs go to.
func newRoutes(t *testing.T) (*httplimit.Routes, *prometheus.Registry, *syncbuf.Buffer) {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logs := &syncbuf.Buffer{}
	hl := routes(t, enforce.Options{Limiter: l, Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return hl, reg, logs
}

// Two routes may not give one rule name two meanings: they would share
// one count (a 2/min route denied by the traffic of a 100/min one).
func TestOneNameOneRuleAcrossRoutes(t *testing.T) {
	hl, _, _ := newRoutes(t)
	api := floodgate.Rule{Name: "api", Limit: 100, Window: time.Minute}
	if _, err := hl.Middleware(httplimit.Route{Name: "list", Limits: []httplimit.Limit{{Rule: api, Key: httplimit.Principal}}}); err != nil {
		t.Fatal(err)
	}
	// The same rule again is fine: one global rule on every route.
	if _, err := hl.Middleware(httplimit.Route{Name: "get", Limits: []httplimit.Limit{{Rule: api, Key: httplimit.Principal}}}); err != nil {
		t.Fatalf("the same rule on a second route: %v", err)
	}
	for _, other := range []floodgate.Rule{
		floodgate.Rule{Name: "api", Limit: 2, Window: time.Minute},
		floodgate.Rule{Name: "api", Limit: 100, Window: time.Hour},
		floodgate.Rule{Name: "api", Limit: 100, Window: time.Minute, Algorithm: floodgate.TokenBucket},
	} {
		_, err := hl.Middleware(httplimit.Route{Name: "export", Limits: []httplimit.Limit{{Rule: other, Key: httplimit.Principal}}})
		if !errors.Is(err, httplimit.ErrInvalidOptions) || !strings.Contains(err.Error(), `rule "api" is `+other.String()) {
			t.Fatalf("%v on a route after %v: %v; want ErrInvalidOptions naming both", other, api, err)
		}
	}
	// A refused route reserves no name.
	if _, err := hl.Middleware(httplimit.Route{Name: "bad", Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "fresh", Limit: 5, Window: time.Minute}}}}); err == nil {
		t.Fatal("a limit without Key was accepted")
	}
	if _, err := hl.Middleware(httplimit.Route{Name: "good", Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "fresh", Limit: 7, Window: time.Minute}, Key: httplimit.Principal}}}); err != nil {
		t.Fatalf("a name a refused route named: %v", err)
	}
}

// A per-user limit whose principal is never set (the middleware runs
// before authentication) limits nobody: every skip is counted, and the
// first logged.
func TestSkippedLimitIsCountedAndLoggedOnce(t *testing.T) {
	hl, reg, logs := newRoutes(t)
	mw, err := hl.Middleware(httplimit.Route{Name: "pix", Limits: []httplimit.Limit{
		{Rule: floodgate.Rule{Name: "per-user", Limit: 1, Window: time.Minute}, Key: httplimit.Principal},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 5 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/pix", nil))
		if rec.Code != 200 {
			t.Fatalf("status %d; a skipped limit lets the request through", rec.Code)
		}
	}
	got := metric(t, reg, "floodgate_skipped_limits_total", map[string]string{"gate": "pix", "policy": "per-user"})
	if got != 5 {
		t.Fatalf("skipped limits counted %v, want 5", got)
	}
	if n := strings.Count(logs.String(), "a limit skipped a request"); n != 1 || !strings.Contains(logs.String(), "policy=per-user") {
		t.Fatalf("logged %d times, want once naming the policy:\n%s", n, logs)
	}
}

// A shadow limit is checked and counted, and never denies: how a new
// limit is rolled out.
func TestShadowLimitCountsAndNeverDenies(t *testing.T) {
	hl, reg, logs := newRoutes(t)
	var got []httplimit.Result
	serve := func(rt httplimit.Route) http.Handler {
		mw, err := hl.Middleware(rt)
		if err != nil {
			t.Fatal(err)
		}
		return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := httplimit.FromContext(r.Context())
			got = append(got, res)
		}))
	}
	perIP := floodgate.Rule{Name: "shadow-ip", Limit: 10, Window: time.Minute}
	perUser := floodgate.Rule{Name: "shadow-user", Limit: 1, Window: time.Minute}
	h := serve(httplimit.Route{Name: "pix", Limits: []httplimit.Limit{
		{Rule: perIP, Key: httplimit.Header("X-IP")},
		{Rule: perUser, Key: httplimit.Header("X-User"), Shadow: true},
	}})
	for i := range 3 {
		req := httptest.NewRequest("POST", "/pix", nil)
		req.Header.Set("X-IP", "192.0.2.1")
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("request %d: %d; a shadow limit never denies", i+1, rec.Code)
		}
		if p := rec.Header().Get("RateLimit-Policy"); p != `"shadow-ip";q=10;w=60` {
			t.Fatalf("request %d: RateLimit-Policy %q; shadow limits send no fields", i+1, p)
		}
	}
	if len(got) != 3 || len(got[0].Shadow) != 1 || !got[0].Shadow[0].Allowed || got[1].Shadow[0].Allowed || got[2].Shadow[0].Policy != "shadow-user" || got[0].Decision.Remaining != 9 {
		t.Fatalf("results %+v; want the shadow decisions allowed, denied, denied, and the IP's count on", got)
	}
	for outcome, want := range map[string]float64{"shadow_allowed": 1, "shadow_denied": 2} {
		if n := metric(t, reg, "floodgate_decisions_total", map[string]string{"gate": "pix", "policy": "shadow-user", "outcome": outcome}); n != want {
			t.Fatalf("%s counted %v, want %v", outcome, n, want)
		}
	}
	if !strings.Contains(logs.String(), "a shadow limit would have denied a request") || !strings.Contains(logs.String(), "policy=shadow-user") {
		t.Fatalf("no log line of the shadow denial:\n%s", logs)
	}

	// A route in shadow mode never denies, past every limit.
	all := serve(httplimit.Route{Name: "new", Shadow: true, Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "shadow-new", Limit: 1, Window: time.Minute}, Key: httplimit.Header("X-User")}}})
	for i := range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", "bob")
		rec := httptest.NewRecorder()
		all.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("shadow route, request %d: %d", i+1, rec.Code)
		}
	}
	if n := metric(t, reg, "floodgate_decisions_total", map[string]string{"gate": "new", "policy": "shadow-new", "outcome": "shadow_denied"}); n != 2 {
		t.Fatalf("shadow route: shadow_denied %v, want 2", n)
	}
}

// A global per-IP middleware around a per-route one that lists the IP
// limit too: the IP counts once, a denial by the inner route gives the
// outer its hit back, the legacy fields describe the worst limit, and the
// nesting is logged once.
func TestNestedMiddlewaresCompose(t *testing.T) {
	hl, _, logs := newRoutes(t)
	ip := floodgate.Rule{Name: "nest-ip", Limit: 10, Window: time.Minute}
	user := floodgate.Rule{Name: "nest-user", Limit: 2, Window: time.Minute}
	global, err := hl.Middleware(httplimit.Route{Name: "global", Limits: []httplimit.Limit{{Rule: ip, Key: httplimit.Header("X-IP")}}})
	if err != nil {
		t.Fatal(err)
	}
	route, err := hl.Middleware(httplimit.Route{Name: "pix", Limits: []httplimit.Limit{
		{Rule: ip, Key: httplimit.Header("X-IP")},
		{Rule: user, Key: httplimit.Header("X-User")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := global(route(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/pix", nil)
		req.Header.Set("X-IP", "192.0.2.1")
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first := send()
	if first.Code != 200 || first.Header().Get("X-RateLimit-Remaining") != "1" || first.Header().Get("X-RateLimit-Limit") != "2" {
		t.Fatalf("first request: %d %v; want 200 with the legacy fields of the worst limit (user: 1 of 2 left)", first.Code, first.Header())
	}
	wantList(t, first.Header(), "RateLimit", "nest-ip;r=9;t=60", "nest-user;r=1;t=60")
	// One field line each, so that a client reading only the first (Go's
	// Header.Get) sees every limit, the inner route's too.
	for _, name := range []string{"RateLimit-Policy", "RateLimit"} {
		if got := first.Header().Values(name); len(got) != 1 {
			t.Errorf("%s sent on %d field lines %q, want one", name, len(got), got)
		}
	}
	if got, want := first.Header().Get("RateLimit-Policy"), `"nest-ip";q=10;w=60, "nest-user";q=2;w=60`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	send()
	if rec := send(); rec.Code != 429 {
		t.Fatalf("third request: %d, want 429 from the user limit", rec.Code)
	}
	// The IP was counted once per admitted request, and the denied one
	// gave it back: 10 - 2.
	d, err := hl.Middleware(httplimit.Route{Name: "probe", Limits: []httplimit.Limit{{Rule: ip, Key: httplimit.Header("X-IP")}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-IP", "192.0.2.1")
	rec := httptest.NewRecorder()
	d(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, req)
	wantList(t, rec.Header(), "RateLimit", "nest-ip;r=7;t=60") // 2 admitted, then this probe
	// The documented pattern is not a mistake: nothing is logged (no
	// warning that one middleware runs inside another).
	if logs.String() != "" {
		t.Fatalf("the documented nesting logged:\n%s", logs)
	}
}

// Three levels of nesting, with a shadow copy of the outer limit inside:
// the IP counts once per request, the handler's Refund undoes every
// route's hits, and a route whose limits an outer one counted leaves the
// outer verdict in place.
func TestNestingCountsOnceAtEveryDepth(t *testing.T) {
	hl, reg, _ := newRoutes(t)
	ip := floodgate.Rule{Name: "deep-ip", Limit: 10, Window: time.Minute}
	user := floodgate.Rule{Name: "deep-user", Limit: 5, Window: time.Minute}
	mw := func(name string, limits ...httplimit.Limit) func(http.Handler) http.Handler {
		m, err := hl.Middleware(httplimit.Route{Name: name, Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	byIP := httplimit.Limit{Rule: ip, Key: httplimit.Header("X-IP")}
	shadowIP := byIP
	shadowIP.Shadow = true
	var got httplimit.Result
	h := mw("outer", byIP)(mw("middle", byIP, httplimit.Limit{Rule: user, Key: httplimit.Header("X-User")})(mw("inner", shadowIP)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = httplimit.FromContext(r.Context()) }))))
	send := func() {
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set("X-IP", "192.0.2.7")
		req.Header.Set("X-User", "dave")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send()
	send()
	if got.Outcome != enforce.Allowed || got.Decision.Policy != "deep-user" || len(got.Shadow) != 0 {
		t.Fatalf("the handler's result %+v; want the middle route's verdict, no shadow check of a counted hit", got)
	}
	probe := func() float64 {
		return metric(t, reg, "floodgate_decisions_total", map[string]string{"gate": "inner", "outcome": "skipped"})
	}
	if n := probe(); n != 0 {
		t.Fatalf("the inner route counted %v skipped decisions; a route whose limits an outer one counted reports nothing", n)
	}
	if err := got.Refund(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Two requests, the second refunded across every route: 9 left of 10
	// for the IP, 4 of 5 for the user.
	req := httptest.NewRequest("POST", "/", nil)
	req.Header.Set("X-IP", "192.0.2.7")
	req.Header.Set("X-User", "dave")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	wantList(t, rec.Header(), "RateLimit", "deep-ip;r=8;t=60", "deep-user;r=3;t=60")
}

// Shadow limits are not checked against a store that has just failed:
// each would wait out its own budget.
func TestShadowSkipsAFailedStore(t *testing.T) {
	l, err := floodgate.New(failing{}, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	hl := routes(t, enforce.Options{Limiter: l, Local: l, Registerer: reg})
	mw, err := hl.Middleware(httplimit.Route{Name: "r", Failure: enforce.FailOpen, Limits: []httplimit.Limit{
		{Rule: floodgate.Rule{Name: "fail-a", Limit: 5, Window: time.Minute}, Key: httplimit.Header("X-K")},
		{Rule: floodgate.Rule{Name: "fail-b", Limit: 5, Window: time.Minute}, Key: httplimit.Header("X-K"), Shadow: true},
		{Rule: floodgate.Rule{Name: "fail-c", Limit: 5, Window: time.Minute}, Key: httplimit.Header("X-K"), Shadow: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got httplimit.Result
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-K", "k")
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = httplimit.FromContext(r.Context()) })).ServeHTTP(rec, req)
	if rec.Code != 200 || got.Outcome != enforce.FailedOpen || len(got.Shadow) != 0 {
		t.Fatalf("%d %+v; want failed open with no shadow checks", rec.Code, got)
	}
	if n := metric(t, reg, "floodgate_store_errors_total", map[string]string{"gate": "r", "reason": "error"}); n != 1 {
		t.Fatalf("store errors %v, want 1: one call to a failed store per request", n)
	}
}

// failing is a store that fails every call at once.
type failing struct{ floodgate.Store }

func (failing) Take(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, errors.New("down")
}

// The Result of a nested request covers every route's hits.
func TestNestedResultCoversEveryRoute(t *testing.T) {
	e := newEnv(t, envOptions{})
	outer, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "ip", 10, time.Minute), Key: httplimit.ClientIP(nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "user", 10, time.Minute), Key: httplimit.Header("User")}}})
	if err != nil {
		t.Fatal(err)
	}
	var got [3]bool
	h := outer(inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		got = [3]bool{httplimit.Covers(res, "ip", "192.0.2.1"), httplimit.Covers(res, "user", "u1"), httplimit.Covers(res, "user", "u2")}
	})))
	if rec := do(h, "192.0.2.1:1", "User", "u1"); rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	if got != [3]bool{true, true, false} {
		t.Errorf("Covers(ip), Covers(user u1), Covers(user u2) = %v, want [true true false]", got)
	}
}

// A per-user limit whose principal is set after the rate-limit check
// limits nobody; the warning that says so reaches the default logger when
// none was given, as in the quick start (otherwise requests pass and
// nothing says why). Not parallel: it sets
// slog's default.
func TestSkippedLimitWarnsWithoutALogger(t *testing.T) {
	logs := &syncbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hl := routes(t, enforce.Options{Limiter: l})
	mw, err := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "per-user", Limit: 5, Window: time.Minute}, Key: httplimit.Principal}}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 6 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil)) // no principal: auth runs after
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
	if n := strings.Count(logs.String(), "skipped a request that has no key"); n != 1 {
		t.Fatalf("%d warnings in the default logger, want 1:\n%s", n, logs)
	}
}

// An opaque route sends no rate-limit fields on any response, whatever it
// is nested in or wraps: a global per-IP route around an opaque login
// wrote its fields before the login route answered, so a login denial
// said "global-ip;r=13" and the legacy fields beside it, and denials by
// the account and by the IP differed by those figures.
func TestOpaqueRouteNestedSendsNoFields(t *testing.T) {
	hl, _, _ := newRoutes(t)
	ip := floodgate.Rule{Name: "opq-global-ip", Limit: 100, Window: time.Minute}
	account := floodgate.Rule{Name: "opq-login-account", Limit: 2, Window: 10 * time.Minute}
	inner := floodgate.Rule{Name: "opq-inner", Limit: 100, Window: time.Minute}
	mw := func(rt httplimit.Route) func(http.Handler) http.Handler {
		m, err := hl.Middleware(rt)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	global := mw(httplimit.Route{Name: "global", Limits: []httplimit.Limit{{Rule: ip, Key: httplimit.Header("X-IP")}}})
	login := mw(httplimit.Route{Name: "login", Opaque: true, Limits: []httplimit.Limit{{Rule: account, Key: httplimit.Header("X-Account")}}})
	plain := mw(httplimit.Route{Name: "inner", Limits: []httplimit.Limit{{Rule: inner, Key: httplimit.Header("X-IP")}}})
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"opaque inside a global route", global(login(ok))},
		{"opaque around a plain route", login(plain(ok))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies []string
			for i, want := range []int{200, 200, 429, 429} {
				req := httptest.NewRequest("POST", "/login", nil)
				req.Header.Set("X-IP", "192.0.2.1")
				req.Header.Set("X-Account", tc.name)
				rec := httptest.NewRecorder()
				tc.h.ServeHTTP(rec, req)
				if rec.Code != want {
					t.Fatalf("request %d: %d, want %d", i+1, rec.Code, want)
				}
				if f := rateLimitFields(rec.Header()); len(f) != 0 {
					t.Fatalf("request %d (%d): an opaque route's answer carries %v", i+1, rec.Code, f)
				}
				if want == 429 {
					if got := rec.Header().Get("Retry-After"); got != "600" {
						t.Errorf("request %d: Retry-After %q, want the opaque route's longest window, 600", i+1, got)
					}
					bodies = append(bodies, rec.Body.String())
				}
			}
			if bodies[0] != bodies[1] || !strings.Contains(bodies[0], `"violated-policies":["login"]`) {
				t.Errorf("the opaque denials differ or name a limit:\n%s\n%s", bodies[0], bodies[1])
			}
		})
	}
}
