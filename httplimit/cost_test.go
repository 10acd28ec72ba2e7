package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// A route takes each request's estimated cost (Limit.Cost) and its
// handler settles the actual one through the Result in the request's
// context: an LLM proxy's token budget, estimated from the prompt and
// settled from the response's usage.
func TestCostSettledAfterTheResponse(t *testing.T) {
	e := newEnv(t, envOptions{})
	tokens := floodgate.Rule{Name: "tokens", Limit: 1000, Window: time.Hour, Algorithm: floodgate.FixedWindow}
	header := func(r *http.Request, name string) int64 {
		n, _ := strconv.ParseInt(r.Header.Get(name), 10, 64)
		return n
	}
	mw, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{
		Rule: tokens, Key: httplimit.Header("X-User"),
		Cost: func(r *http.Request) int64 { return header(r, "X-Estimate") },
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := httplimit.FromContext(r.Context())
		if !ok {
			t.Error("no Result in the handler's context")
			return
		}
		if _, err := res.Settle(r.Context(), "tokens", header(r, "X-Actual")); err != nil {
			t.Error(err)
		}
	}))
	send := func(estimate, actual string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/chat", nil)
		req.Header.Set("X-User", "ana")
		req.Header.Set("X-Estimate", estimate)
		req.Header.Set("X-Actual", actual)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, step := range []struct {
		estimate, actual string
		code             int
		rateLimit        string // as the request was admitted: before its settlement
	}{
		{"300", "100", 200, `"tokens";r=700;t=3600`}, // 200 back
		{"400", "900", 200, `"tokens";r=500;t=3600`}, // 100 + 400 = 500 left 500; 500 more charged: 1,500, past the limit
		{"1", "1", 429, `"tokens";r=0;t=3600`},       // in debt (500 past the limit): denied
	} {
		rec := send(step.estimate, step.actual)
		if rec.Code != step.code || rec.Header().Get("RateLimit") != step.rateLimit {
			t.Fatalf("request %d: %d %q; want %d %q", i+1, rec.Code, rec.Header().Get("RateLimit"), step.code, step.rateLimit)
		}
	}
}
