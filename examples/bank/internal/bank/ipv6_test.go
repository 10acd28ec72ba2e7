package bank

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// An IPv6 client that holds a /48 holds 65,536 /64s, each with its own
// per-IP login budget: the per-network limit (a /48 by default) bounds
// them together, with the other login limits. IPv4 clients and other
// networks are not affected.
func TestLoginLimitPerIPv6Network(t *testing.T) {
	s := newTestServerWith(t, nil, func(c *Config) {
		c.LoginNet, _ = floodgate.ParseLimit("login-net", "5/10m", floodgate.SlidingWindow)
	})
	docs := DemoDocuments(20) // a fresh account per attempt: the account limit stays out of it
	for i := range 5 {
		ip := fmt.Sprintf("[2001:db8:1:%x::1]", i) // a new /64 each time, one /48
		if rec := loginFrom(s, ip, string(docs[i]), "wrong"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d from %s: %d, want 401", i+1, ip, rec.Code)
		}
	}
	for _, tc := range []struct {
		name, ip string
		want     int
	}{
		{"a sixth /64 of the same /48", "[2001:db8:1:ff::1]", http.StatusTooManyRequests},
		{"another /48", "[2001:db8:2::1]", http.StatusUnauthorized},
		{"an IPv4 client", "198.51.100.1", http.StatusUnauthorized},
	} {
		if rec := loginFrom(s, tc.ip, string(docs[10]), "wrong"); rec.Code != tc.want {
			t.Errorf("%s (%s): %d, want %d", tc.name, tc.ip, rec.Code, tc.want)
		}
	}
}

// IPV6_PREFIX sets how IPv6 clients are keyed by the per-IP limits.
func TestIPv6PrefixIsConfigurable(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   int // the answer to the 11th login from a second address of the same /64
	}{
		{"", http.StatusTooManyRequests}, // /64: both addresses share a budget of 10
		{"128", http.StatusUnauthorized}, // each address is its own client
	} {
		t.Run("IPV6_PREFIX="+tc.prefix, func(t *testing.T) {
			cfg, err := ConfigFromEnv(env(map[string]string{"IPV6_PREFIX": tc.prefix}))
			if err != nil {
				t.Fatal(err)
			}
			s := newTestServerWith(t, nil, func(c *Config) { c.IPv6Prefix = cfg.IPv6Prefix })
			docs := DemoDocuments(11)
			for i := range 10 {
				if rec := loginFrom(s, "[2001:db8::a]", string(docs[i]), "wrong"); rec.Code != http.StatusUnauthorized {
					t.Fatalf("attempt %d: %d", i+1, rec.Code)
				}
			}
			if rec := loginFrom(s, "[2001:db8::b]", string(docs[10]), "wrong"); rec.Code != tc.want {
				t.Fatalf("11th attempt from another address of the /64: %d, want %d", rec.Code, tc.want)
			}
		})
	}
	if _, err := ConfigFromEnv(env(map[string]string{"IPV6_PREFIX": "129", "LOGIN_NET_PREFIX": "0"})); err == nil {
		t.Fatal("accepted prefixes out of range")
	}
}
