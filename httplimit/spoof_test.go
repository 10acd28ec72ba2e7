package httplimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/httplimit"
)

func TestClientIPCannotBeSpoofed(t *testing.T) {
	res, err := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24"}, Headers: []string{"X-Forwarded-For"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remote string
		xff    func(i int) string // what arrives, i-th request
	}{
		{"untrusted peer sends X-Forwarded-For", "203.0.113.9:4711",
			func(i int) string { return fmt.Sprintf("198.51.100.%d", i) }},
		{"untrusted peer sends many lines", "203.0.113.9:4711",
			func(i int) string { return fmt.Sprintf("198.51.100.%d, 192.0.2.10", i) }},
		{"client behind the proxy prepends addresses", "192.0.2.10:39042",
			func(i int) string { return fmt.Sprintf("198.51.100.%d, 203.0.113.9", i) }},
		{"client behind the proxy prepends a trusted address", "192.0.2.10:39042",
			func(i int) string { return fmt.Sprintf("192.0.2.%d, 203.0.113.9", i+20) }},
		{"client behind two proxies", "192.0.2.10:39042",
			func(i int) string { return fmt.Sprintf("10.0.0.%d, 203.0.113.9, 192.0.2.11", i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			h := e.handler(t, httplimit.Route{Limits: []httplimit.Limit{{Rule: rule(t, "ip", 3, time.Minute), Key: httplimit.ClientIP(res)}}})
			for i := range 4 {
				rec := do(h, tc.remote, "X-Forwarded-For", tc.xff(i))
				want := 200
				if i == 3 {
					want = 429
				}
				if rec.Code != want {
					t.Fatalf("request %d with X-Forwarded-For %q: %d, want %d: every request must count for 203.0.113.9", i+1, tc.xff(i), rec.Code, want)
				}
			}
			// Someone else behind the same proxy keeps their own quota.
			if rec := do(h, "192.0.2.10:1", "X-Forwarded-For", "198.51.100.200"); rec.Code != 200 {
				t.Fatalf("another client behind the proxy: %d", rec.Code)
			}
		})
	}
}
