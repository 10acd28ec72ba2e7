package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestMemoryUsage measures MEMORY USAGE of full keys, with the Limiter's
// own ids, the default prefix, a rule named "login" and 12-byte keys, for
// the numbers in the package documentation (run with -v to see them). The
// bounds are loose: they catch a layout that blows up, not allocator noise.
func TestMemoryUsage(t *testing.T) {
	s, err := New(ctx(t), Options{URL: "redis://" + redistest.Addr(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := rawClient(t)
	l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	usage := func(key string) int64 {
		n, err := c.Do(ctx(t), c.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	for _, tc := range []struct {
		alg   floodgate.Algorithm
		limit int64
		max   int64
	}{
		// The sliding window's ring: 6 bytes per request and 34 of
		// header, in jemalloc's size classes, and the key (measured:
		// 200, 728, 6,232 and 32,856 bytes; 200, 856, 7,256 and 41,048
		// with 7-byte times and a 29-byte header).
		{floodgate.SlidingWindow, 10, 200},
		{floodgate.SlidingWindow, 100, 740},
		{floodgate.SlidingWindow, 1000, 6_300},
		{floodgate.SlidingWindow, 5000, 33_000},
		{floodgate.TokenBucket, 100, 140},
		{floodgate.FixedWindow, 100, 128},
	} {
		r := mustRule(t, "login", tc.limit, time.Hour, tc.alg)
		key := randomPrefix()[7:19] // 12 random hex digits
		var d floodgate.Decision
		for range tc.limit {
			if d, err = l.Allow(context.Background(), r, key); err != nil || !d.Allowed {
				t.Fatalf("%v: %+v, %v", tc.alg, d, err)
			}
		}
		n := usage(stateKey(s, r, key))
		t.Logf("%v, limit %d, full: MEMORY USAGE %d bytes", tc.alg, tc.limit, n)
		if n > tc.max {
			t.Errorf("%v, limit %d: %d bytes, want at most %d", tc.alg, tc.limit, n, tc.max)
		}
		if tc.alg != floodgate.SlidingWindow {
			if err := l.Refund(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			keys, err := c.Do(ctx(t), c.B().Keys().Pattern(s.tag(r.Name, key)+"r:*").Build()).AsStrSlice()
			if err != nil || len(keys) != 1 {
				t.Fatalf("tombstones: %q, %v", keys, err)
			}
			t.Logf("%v refund tombstone %q: MEMORY USAGE %d bytes", tc.alg, keys[0], usage(keys[0]))
		}
	}
}
