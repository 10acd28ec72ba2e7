package bank

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// The global per-IP limit applies to every API request, checked first:
// malformed logins (400), bodies too large (413) and requests with a
// missing or forged token (401) count against it, and once it is spent
// every API route answers 429, whatever the request. Health probes and
// metrics are never limited.
func TestGlobalLimitCountsEveryAPIRequest(t *testing.T) {
	const limit = 6
	s := newTestServerWith(t, nil, func(c *Config) {
		c.GlobalIP, _ = floodgate.ParseLimit("global-ip", "6/1m", floodgate.SlidingWindow)
	})
	send := func(method, path, body string, header ...string) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = "203.0.113.9:1234"
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	for i, tc := range []struct {
		name, method, path, body string
		header                   []string
		want                     int
	}{
		{"malformed login", "POST", "/login", `{"document":`, nil, 400},
		{"login of an invalid CPF", "POST", "/login", `{"document":"123","password":"x"}`, nil, 400},
		{"login body too large", "POST", "/login", strings.Repeat(" ", 5000), nil, 413},
		{"pix without token", "POST", "/pix", `{"key":"k","amount_cents":1}`, nil, 401},
		{"pix with a forged token", "POST", "/pix", `{"key":"k","amount_cents":1}`, []string{"Authorization", "Bearer x.1.AAAA"}, 401},
		{"statement with a forged token", "GET", "/statement", "", []string{"Authorization", "Bearer x.1.AAAA"}, 401},
	} {
		if got := send(tc.method, tc.path, tc.body, tc.header...); got != tc.want {
			t.Fatalf("request %d (%s): %d, want %d", i+1, tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"malformed login", "POST", "/login", `{"document":`},
		{"well-formed login", "POST", "/login", `{"document":"` + testDoc + `","password":"right"}`},
		{"pix without token", "POST", "/pix", `{"key":"k","amount_cents":1}`},
		{"statement without token", "GET", "/statement", ""},
	} {
		if got := send(tc.method, tc.path, tc.body); got != http.StatusTooManyRequests {
			t.Errorf("%s after %d API requests from one IP (global limit %d): %d, want 429", tc.name, limit, limit, got)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := send("GET", path, ""); got != http.StatusOK {
			t.Errorf("GET %s with the global limit spent: %d, want 200 (probes are not limited)", path, got)
		}
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /metrics with the global limit spent: %d, want 200", rec.Code)
	}
}
