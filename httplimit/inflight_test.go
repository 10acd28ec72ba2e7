package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// A concurrency limit is a limit like any other: a request holds its slot
// until its handler returns, renewed past the lease's time to live while
// it runs; a request beyond the limit gets 429 with the usual fields and
// takes nothing from the route's rate.
func TestRequestsInFlight(t *testing.T) {
	e := newEnv(t, envOptions{})
	rate := floodgate.Rule{Name: "rate", Limit: 100, Window: time.Hour, Algorithm: floodgate.SlidingWindow}
	inflight := floodgate.Rule{Name: "inflight", Limit: 1, Window: 300 * time.Millisecond, Algorithm: floodgate.Concurrency}
	mw, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: rate, Key: httplimit.Header("X-User")},
		{Rule: inflight, Key: httplimit.Header("X-User")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			entered <- struct{}{}
			<-leave
		}
	}))
	send := func(slow bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/report", nil)
		req.Header.Set("X-User", "ana")
		if slow {
			req.Header.Set("X-Slow", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- send(true) }()
	<-entered
	time.Sleep(time.Second) // past the lease's time to live: renewed
	rec := send(false)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" ||
		rec.Header().Get("RateLimit") != `"rate";r=99;t=3600, "inflight";r=0;t=1` {
		t.Fatalf("a second request in flight: %d, Retry-After %q, RateLimit %q; want 429 from the concurrency limit",
			rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit"))
	}
	// The policy says what the limit counts: requests in flight, with no
	// window (300ms is the leases' time to live, not a window).
	if got, want := rec.Header().Get("RateLimit-Policy"), `"rate";q=100;w=3600, "inflight";q=1;qu="concurrent-requests"`; got != want {
		t.Fatalf("RateLimit-Policy %q; want %q", got, want)
	}
	if body := rec.Body.String(); !strings.Contains(body, `"detail":"Quota exceeded: 1 requests at once (inflight); retry after `) {
		t.Fatalf("problem body %s; want a detail naming 1 request at once", body)
	}
	close(leave)
	if rec := <-done; rec.Code != http.StatusOK {
		t.Fatalf("the slow request: %d", rec.Code)
	}
	// Its handler returned: the slot is free, and the denied request took
	// nothing from the rate (98 left after this one and the slow one).
	rec = send(false)
	if want := `"rate";r=98;t=3600, "inflight";r=0;t=1`; rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != want {
		t.Fatalf("after the slow request ended: %d, RateLimit %q; want 200 and %q", rec.Code, rec.Header().Get("RateLimit"), want)
	}
	if rec := send(false); rec.Code != http.StatusOK {
		t.Fatalf("a request after one that ended: %d; each request must release its slot when its handler returns", rec.Code)
	}
}
