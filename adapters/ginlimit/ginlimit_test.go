package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/adapters/ginlimit"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// routes returns a Routes on a memstore, with its own metrics registry;
// what it built is closed when t ends.
func routes(t *testing.T) *httplimit.Routes {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	en, err := enforce.New(enforce.Options{Limiter: l, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { en.Close() })
	hl, err := httplimit.New(httplimit.Options{Enforcer: en})
	if err != nil {
		t.Fatal(err)
	}
	return hl
}

// app is a gin engine with a fake authentication (the user in the X-User
// header, set in gin's context), a per-user limit of 2 a minute on POST
// /pix, and a handler that reports what gin's context holds.
func app(t *testing.T) (*gin.Engine, *int) {
	t.Helper()
	gin.SetMode(gin.TestMode)
	hl := routes(t)
	pix, err := hl.Middleware(httplimit.Route{
		Name:   "pix",
		Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "pix", Limit: 2, Window: time.Minute}, Key: httplimit.Principal}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
		c.Next()
	}, ginlimit.Principal("user"))
	ran := new(int)
	r.POST("/pix", ginlimit.Middleware(pix), func(c *gin.Context) {
		*ran++
		res, ok := ginlimit.Result(c)
		if !ok {
			c.String(http.StatusInternalServerError, "no result in gin's context")
			return
		}
		c.String(http.StatusOK, "created, %d left", res.Decision.Remaining)
	})
	return r, ran
}

func post(r http.Handler, user string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/pix", nil)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	return rec
}

func TestGinLimitsPerPrincipal(t *testing.T) {
	r, _ := app(t)
	for i, want := range []struct {
		code int
		body string
	}{{200, "created, 1 left"}, {200, "created, 0 left"}, {429, ""}} {
		rec := post(r, "alice")
		if rec.Code != want.code {
			t.Fatalf("alice's request %d: %d %q, want %d", i+1, rec.Code, rec.Body, want.code)
		}
		if want.body != "" && rec.Body.String() != want.body {
			t.Fatalf("alice's request %d: body %q, want %q: the handler must see httplimit's Result in gin's context", i+1, rec.Body, want.body)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != `"pix";q=2;w=60` {
			t.Fatalf("alice's request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	denied := post(r, "alice")
	if denied.Code != 429 || denied.Header().Get("Retry-After") == "" || denied.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("denied request: %d, headers %v; want httplimit's 429", denied.Code, denied.Header())
	}
	// Another principal has a count of its own: the principal came from
	// gin's context.
	if rec := post(r, "bob"); rec.Code != 200 {
		t.Fatalf("bob's first request: %d %q", rec.Code, rec.Body)
	}
}

// A denied request stops gin's chain: the handler does not run.
func TestGinDenialAbortsTheChain(t *testing.T) {
	r, ran := app(t)
	for range 2 {
		post(r, "carol")
	}
	rec := post(r, "carol")
	if rec.Code != 429 || rec.Body.Len() == 0 {
		t.Fatalf("3rd request: %d %q; want httplimit's 429", rec.Code, rec.Body)
	}
	if *ran != 2 {
		t.Fatalf("the handler ran %d times for 2 allowed requests and 1 denied", *ran)
	}
}

// ClientIP keys by gin's client address, which follows the engine's
// trusted proxies: two clients behind a trusted proxy get a limit each,
// and a forwarded header from an untrusted peer is not believed (with
// httplimit.ClientIP(nil), which ignores SetTrustedProxies, every client
// behind the proxy would share one key).
func TestClientIPFollowsGinsTrustedProxies(t *testing.T) {
	gin.SetMode(gin.TestMode)
	hl := routes(t)
	perIP, err := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: floodgate.Rule{Name: "gin-ip", Limit: 1, Window: time.Minute}, Key: ginlimit.ClientIP}}})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"192.0.2.0/24"}); err != nil {
		t.Fatal(err)
	}
	r.GET("/", ginlimit.Middleware(perIP), func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	get := func(peer, forwarded string) (int, string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = peer + ":1234"
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("RateLimit")
	}
	for _, c := range []struct {
		peer, forwarded string
		code            int
	}{
		{"192.0.2.10", "203.0.113.1", 200},   // through the proxy: client .1
		{"192.0.2.10", "203.0.113.2", 200},   // another client, its own key
		{"192.0.2.10", "203.0.113.1", 429},   // .1 again: its limit
		{"198.51.100.7", "203.0.113.3", 200}, // an untrusted peer: keyed by itself
		{"198.51.100.7", "203.0.113.4", 429}, // its forged header changes nothing
		{"192.0.2.11", "2001:db8:1:2::5", 200},
		{"192.0.2.11", "2001:db8:1:2::6", 429}, // one /64
	} {
		if code, quota := get(c.peer, c.forwarded); code != c.code {
			t.Errorf("peer %s for %s: %d (%s), want %d", c.peer, c.forwarded, code, quota, c.code)
		}
	}
}
