package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
)

// A key with an override is limited, and told, by the rule in force: the
// RateLimit-Policy and legacy fields carry the override's quota, other
// keys the route's.
func TestFieldsReportTheOverride(t *testing.T) {
	api := floodgate.Rule{Name: "api", Limit: 2, Window: time.Minute}
	set, err := overrides.NewSet(overrides.Entry{Rule: floodgate.Rule{Name: "api", Limit: 5, Window: 2 * time.Minute}, Key: "vip"})
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	lim, err := floodgate.New(ms, floodgate.Options{Overrides: set})
	if err != nil {
		t.Fatal(err)
	}
	hl := routes(t, enforce.Options{Limiter: lim})
	mw, err := hl.Middleware(httplimit.Route{Name: "api", Limits: []httplimit.Limit{{Rule: api, Key: func(r *http.Request) string { return r.Header.Get("Key") }}}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tc := range []struct {
		key, policy, limit string
		admitted           int
	}{
		{"vip", `"api";q=5;w=120`, "5", 5},
		{"plain", `"api";q=2;w=60`, "2", 2},
	} {
		admitted := 0
		for range 7 {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("Key", tc.key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusOK {
				admitted++
			}
			if p, l := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Limit"); p != tc.policy || l != tc.limit {
				t.Fatalf("%s: RateLimit-Policy %q, X-RateLimit-Limit %q; want %q, %q", tc.key, p, l, tc.policy, tc.limit)
			}
		}
		if admitted != tc.admitted {
			t.Errorf("%s: %d of 7 admitted; want %d", tc.key, admitted, tc.admitted)
		}
	}
}
