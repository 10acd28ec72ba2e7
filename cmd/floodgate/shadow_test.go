package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestShadowLimitsAreNotBlocked: a shadow_mode limit is counted and never
// denies, so a key over it is not blocked: peek says a request would be
// allowed, and blocked marks the key and does not count it. The service's
// SHADOW_MODE puts every limit in shadow mode.
func TestShadowLimitsAreNotBlocked(t *testing.T) {
	dir := t.TempDir()
	conf := `domain: rl
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + redistest.Addr(t)
	prefix := testPrefix(t)
	l := newLimiter(t, url, prefix)
	keys := map[string]string{}
	for _, k := range []string{"user", "trial"} {
		m := (*rlmatch.Config)(cfg).Match("rl", []rlmatch.Entry{{Key: k, Value: "carol"}})
		if d, err := l.Check(context.Background(), m.Hits(1)...); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		keys[k] = keyenc.Encode(m.Key)
	}
	type listedShadow struct {
		Key    string `json:"key"`
		Shadow bool   `json:"shadow"`
	}
	for _, tc := range []struct {
		shadowMode string
		blocked    int             // keys counted as blocked
		shadow     map[string]bool // by descriptor key: listed in shadow mode
	}{
		{"", 1, map[string]bool{"user": false, "trial": true}},
		{"true", 0, map[string]bool{"user": true, "trial": true}},
	} {
		vars := map[string]string{"REDIS_URL": url, "SHADOW_MODE": tc.shadowMode}
		code, out, errs := cliEnv(t, vars, "blocked", "-config", dir, "-domain", "rl", "-prefix", prefix, "-o", "json")
		got := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var l listedShadow
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("SHADOW_MODE=%q: line %q: %v", tc.shadowMode, line, err)
			}
			got[l.Key] = l.Shadow
		}
		for k, shadow := range tc.shadow {
			if s, ok := got[keys[k]]; !ok || s != shadow {
				t.Errorf("SHADOW_MODE=%q: %s=carol listed %v, shadow %v; want listed, shadow %v: %s", tc.shadowMode, k, ok, s, shadow, out)
			}
		}
		if code != 0 || !strings.Contains(errs, strconv.Itoa(tc.blocked)+" key(s) blocked") {
			t.Errorf("SHADOW_MODE=%q: blocked = %d, summary %q; want %d key(s) blocked (a shadow limit never denies)", tc.shadowMode, code, errs, tc.blocked)
		}
		code, out, _ = cliEnv(t, vars, "blocked", "-config", dir, "-domain", "rl", "-prefix", prefix)
		if code != 0 || !strings.Contains(out, strconv.Itoa(tc.blocked)+" key(s) blocked") || !strings.Contains(out, "shadow") {
			t.Errorf("SHADOW_MODE=%q: text listing = %d %q; want %d blocked and the shadow keys marked", tc.shadowMode, code, out, tc.blocked)
		}
		for k, shadow := range tc.shadow {
			code, out, errs := cliEnv(t, vars, "peek", "-config", dir, "-domain", "rl", "-prefix", prefix, "-o", "json", k+"=carol")
			var p map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p["allowed"] != shadow || p["shadow"] != shadow {
				t.Errorf("SHADOW_MODE=%q: peek %s=carol = %d %q %q; want allowed and shadow %v", tc.shadowMode, k, code, out, errs, shadow)
			}
		}
	}
}
