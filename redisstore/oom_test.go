package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestOutOfMemoryKeepsEnforcing puts a Redis of its own at maxmemory with
// noeviction and checks that sliding windows keep deciding: every write of
// a ring starts with PEXPIRE, which Redis lets through, and the writes
// after it in the same script are then allowed (docs/RELIABILITY.md). A
// script whose first write is a SET or SETRANGE fails with OOM instead.
func TestOutOfMemoryKeepsEnforcing(t *testing.T) {
	srv := redistest.Start(t)
	s := newStoreURL(t, srv.URL())
	r := mustRule(t, "oom", 3, time.Minute, floodgate.SlidingWindow)
	take := func(id string, keys ...string) []floodgate.Result {
		t.Helper()
		var hits []floodgate.Hit
		for _, k := range keys {
			hits = append(hits, floodgate.Hit{Rule: r, Key: k, Cost: 1})
		}
		res, err := s.Take(ctx(t), hits)
		if err != nil {
			t.Fatalf("take %s of %v at maxmemory: %v; a full Redis must keep enforcing", id, keys, err)
		}
		return res
	}
	take("before", "a")
	for _, args := range [][]string{{"CONFIG", "SET", "maxmemory-policy", "noeviction"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		if _, err := redistest.Command(srv.Addr(), args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { redistest.Command(srv.Addr(), "CONFIG", "SET", "maxmemory", "0") })
	for i, tc := range []struct {
		keys      []string
		allowed   bool
		remaining int64
	}{
		{[]string{"a"}, true, 1},      // an append
		{[]string{"b"}, true, 2},      // a new ring
		{[]string{"a", "c"}, true, 0}, // a group of two: the general path
		{[]string{"a"}, false, 0},     // full: a denial writes nothing
	} {
		res := take("t"+string(rune('0'+i)), tc.keys...)
		if res[0].Allowed != tc.allowed || res[0].Remaining != tc.remaining {
			t.Errorf("take %d of %v: allowed %v, remaining %d; want %v, %d", i, tc.keys, res[0].Allowed, res[0].Remaining, tc.allowed, tc.remaining)
		}
	}
}
