package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// The middleware wraps handlers of a Go 1.22 ServeMux; key functions and
// handlers see the pattern's path values.
func TestServeMux(t *testing.T) {
	e := newEnv(t, envOptions{})
	perAccount, err := e.hl.Middleware(httplimit.Route{Name: "pix", Limits: []httplimit.Limit{
		{Rule: rule(t, "global-ip", 100, time.Minute), Key: httplimit.ClientIP(nil)},
		{Rule: rule(t, "pix", 2, time.Minute), Key: func(r *http.Request) string { return r.PathValue("account") }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{account}/pix", perAccount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "pix from ", r.PathValue("account"))
	})))
	mux.Handle("GET /healthz", ok)

	send := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.1:1"
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []int{200, 200, 429} {
		rec := send("POST", "/accounts/a1/pix")
		if rec.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, rec.Code, want)
		}
		if want == 200 && rec.Body.String() != "pix from a1" {
			t.Fatalf("body %q: the handler lost the path value", rec.Body)
		}
	}
	if rec := send("POST", "/accounts/a2/pix"); rec.Code != 200 {
		t.Fatalf("another account: %d", rec.Code)
	}
	if rec := send("GET", "/accounts/a3/pix"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("RateLimit") != "" {
		t.Fatalf("wrong method: %d %v; the mux must answer before the limiter", rec.Code, rec.Header())
	}
	if rec := send("GET", "/healthz"); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
		t.Fatalf("unlimited route: %d %v", rec.Code, rec.Header())
	}
	wantList(t, send("POST", "/accounts/a4/pix").Header(), "RateLimit", "global-ip;r=96;t=60", "pix;r=1;t=60")
}

// With chi, one middleware can cover a group (r.Use) and another a single
// route (r.With); the stacked fields combine into one list.
func TestChi(t *testing.T) {
	e := newEnv(t, envOptions{})
	global, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "global-ip", 100, time.Minute), Key: httplimit.ClientIP(nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	statement, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: rule(t, "statement", 2, time.Minute), Key: func(r *http.Request) string { return chi.URLParam(r, "account") }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Route("/accounts/{account}", func(r chi.Router) {
		r.Use(global)
		r.With(statement).Get("/statement", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "statement of ", chi.URLParam(r, "account"))
		})
		r.Get("/profile", ok)
	})
	send := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "192.0.2.1:1"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []int{200, 200, 429} {
		if rec := send("/accounts/a1/statement"); rec.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, rec.Code, want)
		} else if want == 200 && !strings.HasSuffix(rec.Body.String(), "a1") {
			t.Fatalf("body %q", rec.Body)
		}
	}
	// The third statement, denied by the inner middleware, gave the global
	// one its hit back: the nesting is all-or-nothing.
	rec := send("/accounts/a1/profile")
	wantList(t, rec.Header(), "RateLimit", "global-ip;r=97;t=60")
	rec = send("/accounts/a2/statement")
	wantList(t, rec.Header(), "RateLimit-Policy", "global-ip;q=100;w=60", "statement;q=2;w=60")
	wantList(t, rec.Header(), "RateLimit", "global-ip;r=96;t=60", "statement;r=1;t=60")
}
