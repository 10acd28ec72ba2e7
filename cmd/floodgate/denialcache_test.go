package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestResetAndOverrideSayHowLongACachedDenialLasts: a service with a
// denial cache (DENIAL_CACHE_SIZE, LOCAL_CACHE_SIZE_IN_BYTES) keeps
// answering a denial it cached before a reset or an override until the
// denial's Retry-After runs out (floodgate.Options.DenialCacheSize), so
// reset and override say so, with the longest that can be under the rule:
// a window for a sliding or fixed window, two for a sliding-window
// counter, a whole bucket's refill for a token bucket.
func TestResetAndOverrideSayHowLongACachedDenialLasts(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	prefix := testPrefix(t)
	for _, tc := range []struct {
		rule string
		want time.Duration
	}{
		{"name=login,limit=5/10m", 10 * time.Minute},
		{"name=login,limit=5/10m,algorithm=fixed-window", 10 * time.Minute},
		{"name=login,limit=5/10m,algorithm=sliding-window-counter", 20 * time.Minute},
		{"name=login,limit=5/10m,algorithm=token-bucket,burst=10", 20 * time.Minute}, // 10 tokens, one every 2m
	} {
		code, out, errs := cli(t, url, "reset", "-rule", tc.rule, "-prefix", prefix, "alice")
		if code != 0 || !strings.Contains(out, "denial cache") || !strings.Contains(out, "at most "+tc.want.String()) {
			t.Errorf("reset -rule %s = %d %q %q; want a word on denial caches, at most %v", tc.rule, code, out, errs, tc.want)
		}
		code, out, errs = cli(t, url, "reset", "-rule", tc.rule, "-prefix", prefix, "-o", "json", "alice")
		var got map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["cached_denial_max_ms"] != float64(tc.want.Milliseconds()) {
			t.Errorf("reset -rule %s -o json = %d %q %q; want cached_denial_max_ms %d", tc.rule, code, out, errs, tc.want.Milliseconds())
		}
	}

	// An override set: cached denials of the key's old rule end when the
	// services read it (5s); one cached earlier under the new rule lasts
	// at most its longest wait.
	code, out, errs := cli(t, url, "override", "set", "-rule", "api", "-limit", "100/1h", "-prefix", prefix, "cust-42")
	if code != 0 || !strings.Contains(out, "denial cache") || !strings.Contains(out, "at most 1h0m0s") {
		t.Errorf("override set = %d %q %q; want a word on denial caches, at most 1h0m0s", code, out, errs)
	}
	code, out, errs = cli(t, url, "override", "set", "-rule", "api", "-limit", "100/1s", "-prefix", prefix, "-o", "json", "cust-42")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["cached_denial_max_ms"] != 5000.0 {
		t.Errorf("override set 100/1s -o json = %d %q %q; want cached_denial_max_ms 5000 (the refresh interval)", code, out, errs)
	}
	// An override removed: the key's own rule applies again, and with it
	// a denial cached under it before the override, for at most that
	// rule's longest wait, which the configuration tells.
	if code, out, errs := cli(t, url, "override", "rm", "-rule", "api", "-prefix", prefix, "cust-42"); code != 0 || !strings.Contains(out, "denial cache") {
		t.Errorf("override rm = %d %q %q; want a word on denial caches", code, out, errs)
	}
	dir := t.TempDir()
	conf := "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, url, "override", "set", "-config", dir, "-domain", "rl", "-limit", "5/1m", "-prefix", prefix, "user=carol"); code != 0 {
		t.Fatalf("override set -config = %d %q %q", code, out, errs)
	}
	code, out, errs = cli(t, url, "override", "rm", "-config", dir, "-domain", "rl", "-prefix", prefix, "user=carol")
	if code != 0 || !strings.Contains(out, "denial cache") || !strings.Contains(out, "at most 1h0m0s") {
		t.Errorf("override rm -config = %d %q %q; want a word on denial caches, at most the limit's 1h0m0s", code, out, errs)
	}
}
