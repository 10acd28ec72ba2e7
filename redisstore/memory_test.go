package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

// TestMemoryUsage measures MEMORY USAGE of full keys, with the Limiter's
// own ids, the default prefix, a rule named "login" and 12-byte keys, for
// the numbers in the package documentation (run with -v to see them). The
// bounds are loose: they catch a layout that blows up, not allocator noise.
func TestMemoryUsage(t *testing.T) {
	s, c, l := memoryLimiter(t)
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
		var err error
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

// TestMemoryOfOneSlidingHit: what one sliding-window hit can make Redis
// hold for its window (a cost of 1,000 would hold 6 KB, 28 times a
// request of cost 1). A hit costs at most bounds.SlidingCost, 100:
// a clear error past it; and an overdraw hit past the limit keeps at most
// the limit again (4 here) of its times, not its cost.
func TestMemoryOfOneSlidingHit(t *testing.T) {
	s, c, l := memoryLimiter(t)
	usage := func(r floodgate.Rule, key string) int64 {
		n, err := c.Do(ctx(t), c.B().MemoryUsage().Key(stateKey(s, r, key)).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatalf("MEMORY USAGE: %v", err)
		}
		return n
	}
	r := mustRule(t, "login", 1000, time.Hour, floodgate.SlidingWindow)
	one, most := randomPrefix()[7:19], randomPrefix()[7:19]
	if d, err := l.Check(context.Background(), floodgate.Hit{Rule: r, Key: one}); err != nil || !d.Allowed {
		t.Fatalf("a hit of cost 1: %+v, %v", d, err)
	}
	if d, err := l.Check(context.Background(), floodgate.Hit{Rule: r, Key: most, Cost: 100}); err != nil || !d.Allowed || d.Remaining != 900 {
		t.Fatalf("a hit of cost 100: %+v, %v; want allowed, Remaining 900", d, err)
	}
	n1, n100 := usage(r, one), usage(r, most)
	t.Logf("one sliding-window hit: cost 1 %d bytes, cost 100 %d bytes (%.1fx)", n1, n100, float64(n100)/float64(n1))
	if n100 > 740 {
		t.Errorf("a hit of cost 100: %d bytes, want at most 740 (100 times of 6 bytes, a header and the key)", n100)
	}
	for _, over := range []bool{false, true} {
		_, err := l.Check(context.Background(), floodgate.Hit{Rule: r, Key: randomPrefix()[7:19], Cost: 101, Overdraw: over})
		if !errors.Is(err, floodgate.ErrInvalidHit) || !strings.Contains(err.Error(), "cost 101 is above 100, the most a sliding-window log records in one hit") {
			t.Fatalf("a hit of cost 101 (overdraw %v): %v; want ErrInvalidHit naming the cap", over, err)
		}
	}
	small := mustRule(t, "small", 4, time.Hour, floodgate.SlidingWindow)
	k := randomPrefix()[7:19]
	d, err := l.Check(context.Background(), floodgate.Hit{Rule: small, Key: k, Cost: 100, Overdraw: true})
	if err != nil || d.Allowed || !d.Recorded || d.Remaining != -4 {
		t.Fatalf("an overdraw hit of cost 100 on a limit of 4: %+v, %v; want recorded, Remaining -4 (8 times kept)", d, err)
	}
	if n := usage(small, k); n > 200 {
		t.Errorf("an overdraw hit of cost 100 on a limit of 4: %d bytes, want at most 200 (8 times kept)", n)
	}
}

// memoryLimiter returns a store on the test Redis (closed when t ends), a
// raw client of that Redis to measure it, and a Limiter on the store with
// a budget loose enough for a loaded machine.
func memoryLimiter(t *testing.T) (*Store, rueidis.Client, *floodgate.Limiter) {
	t.Helper()
	s, err := New(ctx(t), Options{URL: "redis://" + redistest.Addr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s, rawClient(t), l
}
