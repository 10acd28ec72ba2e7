package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestPerIP(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.PerIP(l, 3, time.Minute)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(addr string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []int{200, 200, 200, 429} {
		if rec := get("192.0.2.1:1234"); rec.Code != want {
			t.Fatalf("request %d from one address: %d, want %d", i+1, rec.Code, want)
		}
	}
	rec := get("192.0.2.1:9999") // another port, the same client
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("the same client from another port: %d %v", rec.Code, rec.Header())
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"ip-3-per-1m0s";q=3;w=60` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if rec := get("192.0.2.2:1234"); rec.Code != 200 {
		t.Fatalf("another client: %d; each address has its own count", rec.Code)
	}
	// Two PerIP limits never share a count, whatever their order.
	other := httplimit.PerIP(l, 10, time.Minute)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:1"
	rec = httptest.NewRecorder()
	other.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("a second PerIP of another limit: %d; it must not see the first's count", rec.Code)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("PerIP of limit 0 did not panic")
		}
	}()
	httplimit.PerIP(l, 0, time.Minute)
}

// A peer with no address (a Unix socket listener) is limited too: such
// requests share one count.
func TestPerIPWithoutAnAddress(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.PerIP(l, 1, time.Minute)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var codes []int
	for _, addr := range []string{"@", "", "@"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if codes[0] != 200 || codes[1] != 429 || codes[2] != 429 {
		t.Fatalf("statuses %v; want 200 then 429: addressless peers share one count", codes)
	}
}

// Two PerIP of the same limit and window are one rule: the routes they
// guard share each address's count, as the doc says.
func TestPerIPOfOneLimitSharesItsCount(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	a, b := httplimit.PerIP(l, 2, time.Minute)(ok), httplimit.PerIP(l, 2, time.Minute)(ok)
	var codes []int
	for _, h := range []http.Handler{a, b, a, b} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.5:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 || codes[3] != 429 {
		t.Fatalf("statuses %v over routes a, b, a, b; want 200 200 429 429: one count of 2 for both", codes)
	}
}
