package redisopt_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
)

func TestFromURL(t *testing.T) {
	cases := []struct {
		url  string
		dial time.Duration
		want time.Duration
	}{
		{"redis://127.0.0.1:6379", 0, time.Second},
		{"redis://127.0.0.1:6379", 3 * time.Second, 3 * time.Second},
		{"redis://127.0.0.1:6379?dial_timeout=2s", 0, 2 * time.Second},
		{"redis://127.0.0.1:6379?dial_timeout=2s", 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range cases {
		opt, err := redisopt.FromURL(tc.url, tc.dial, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if !opt.DisableCache || opt.Dialer.Timeout != tc.want {
			t.Errorf("%s, dial %v: cache off %v, dial timeout %v; want cache off, %v", tc.url, tc.dial, opt.DisableCache, opt.Dialer.Timeout, tc.want)
		}
	}
	if _, err := redisopt.FromURL("ftp://x", 0, time.Second); err == nil {
		t.Error("ftp://x parsed")
	}
}
