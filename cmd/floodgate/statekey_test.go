package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestPeekAndBlockedNameTheStateKey: peek and blocked name the Redis key
// of each state they read, as redisstore lays it out (StateKey), so that
// an operator can look at it with redis-cli; a hashed key's too.
func TestPeekAndBlockedNameTheStateKey(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	prefix := testPrefix(t)
	l := newLimiter(t, url, prefix)
	rule := floodgate.Rule{Name: "login", Limit: 2, Window: 10 * time.Minute}
	want := map[string]bool{}
	for _, key := range []string{"alice@example.com", "{braces} and\nnewline"} {
		for range 2 {
			if d, err := l.Allow(context.Background(), rule, key); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
		sk, err := rediskeys.StateKey(prefix, rule, key)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := redistest.Command(redistest.Addr(t), "EXISTS", sk); err != nil || n != "1" {
			t.Fatalf("EXISTS %q = %q, %v", sk, n, err)
		}
		want[sk] = true
		code, out, errs := cli(t, url, "peek", "-rule", "name=login,limit=2/10m", "-prefix", prefix, "-o", "json", key)
		var got map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["state_key"] != sk {
			t.Errorf("peek %q = %d %q %q; want state_key %q", key, code, out, errs, sk)
		}
		if code, out, _ := cli(t, url, "peek", "-rule", "name=login,limit=2/10m", "-prefix", prefix, key); code != 0 || !strings.Contains(out, sk) {
			t.Errorf("text peek %q = %d %q; want it to name %q", key, code, out, sk)
		}
	}
	code, out, errs := cli(t, url, "blocked", "-rule", "name=login,limit=2/10m", "-prefix", prefix, "-o", "json")
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var v struct {
			StateKey string `json:"state_key"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got[v.StateKey] = true
	}
	if code != 0 || len(got) != len(want) {
		t.Fatalf("blocked = %d %q %q; want the state keys %v", code, out, errs, want)
	}
	for sk := range want {
		if !got[sk] {
			t.Errorf("blocked does not name state key %q: %s", sk, out)
		}
	}
}
