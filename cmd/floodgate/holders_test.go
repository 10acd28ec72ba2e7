package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestPeekAndBlockedShowHolders: floodgate peek tells how many leases of
// a concurrency limit hold a key, and floodgate blocked lists the keys at
// their limit of holders, and no other.
func TestPeekAndBlockedShowHolders(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	ctx := context.Background()
	prefix := testPrefix(t)
	l := newLimiter(t, url, prefix)
	rule := floodgate.Rule{Name: "exports", Limit: 3, Window: time.Minute, Algorithm: floodgate.Concurrency}
	const spec = "name=exports,limit=3/1m,algorithm=concurrency"
	held := map[string]int{"full-tenant": 3, "busy-tenant": 2}
	for key, n := range held {
		for range n {
			if d, err := l.Allow(ctx, rule, key); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", key, d, err)
			}
		}
	}
	for key, n := range held {
		code, out, errs := cli(t, url, "peek", "-rule", spec, "-prefix", prefix, "-o", "json", key)
		var got map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["holders"] != float64(n) || got["allowed"] != (n < 3) {
			t.Fatalf("peek %s = %d %q %q; want %d holders", key, code, out, errs, n)
		}
	}
	code, out, _ := cli(t, url, "peek", "-rule", spec, "-prefix", prefix, "full-tenant")
	if code != 0 || !strings.Contains(out, "3 of 3 slots held; a request now would be denied") || !strings.Contains(out, "once a holder releases its lease") {
		t.Fatalf("text peek = %d %q", code, out)
	}
	code, out, errs := cli(t, url, "blocked", "-rule", spec, "-prefix", prefix, "-o", "json")
	var line map[string]any
	if code != 0 || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &line) != nil ||
		line["key"] != "full-tenant" || line["holders"] != 3.0 || line["remaining"] != 0.0 {
		t.Fatalf("blocked = %d %q %q; want full-tenant alone, with 3 holders", code, out, errs)
	}
	code, out, _ = cli(t, url, "blocked", "-rule", spec, "-prefix", prefix)
	if code != 0 || !strings.Contains(out, "full-tenant (3 holders)") || strings.Contains(out, "busy-tenant") {
		t.Fatalf("blocked (text) = %d %q", code, out)
	}
}
