package floodgate

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// boundCache is a denial cache on a hand-moved clock, and helpers to fill
// it with single-hit denials of distinct keys.
type boundCache struct {
	*denialCache
	clock *fakeClock
	rule  Rule
}

func newBoundCache(t *testing.T, size int) boundCache {
	t.Helper()
	c := newDenialCache(size)
	clock := &fakeClock{}
	c.now = clock.read
	return boundCache{c, clock, testRule(t, "r")}
}

// add caches a denial of key with the given RetryAfter, sent now.
func (c boundCache) add(key string, retry time.Duration) {
	hits := []Hit{{Rule: c.rule, Key: key}}
	d := Decision{Policy: c.rule.Name, RetryAfter: retry, ResetAfter: retry}
	c.denialCache.add(c.probe(hits), hits, d, c.now())
}

func (c boundCache) has(key string) bool {
	hits := []Hit{{Rule: c.rule, Key: key}}
	_, ok := c.get(c.probe(hits), hits)
	return ok
}

func (c boundCache) lens() []int {
	n := make([]int, len(c.shards))
	for i := range c.shards {
		n[i] = len(c.shards[i].m)
	}
	return n
}

// TestDenialCacheSharding: a cache of fewer than 64 denials is one shard
// of that size; from 64 on, 16 shards share the size.
func TestDenialCacheSharding(t *testing.T) {
	for _, tc := range []struct{ size, shards, perShard int }{
		{1, 1, 1}, {4, 1, 4}, {63, 1, 63}, {64, 16, 4}, {100, 16, 6}, {1600, 16, 100},
	} {
		c := newDenialCache(tc.size)
		if len(c.shards) != tc.shards || c.perShard != tc.perShard {
			t.Errorf("newDenialCache(%d): %d shards of %d; want %d of %d", tc.size, len(c.shards), c.perShard, tc.shards, tc.perShard)
		}
	}
}

// TestDenialCacheShardBound: no shard ever holds more than its share, and
// a full shard makes room for each new denial by evicting exactly one.
func TestDenialCacheShardBound(t *testing.T) {
	for _, size := range []int{1, 5, 64, 100} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c := newBoundCache(t, size)
			limit := max(1, c.perShard)
			full := make([]bool, len(c.shards))
			for i := range 40 * size {
				key := "k" + strconv.Itoa(i)
				hits := []Hit{{Rule: c.rule, Key: key}}
				sh := c.shard(c.probe(hits))
				before := len(sh.m)
				c.add(key, time.Minute)
				if !c.has(key) {
					t.Fatalf("denial %d was not cached", i)
				}
				switch after := len(sh.m); {
				case after > limit:
					t.Fatalf("a shard holds %d denials; its bound is %d", after, limit)
				case before == limit && after != limit:
					t.Fatalf("a full shard went from %d to %d denials; want one evicted for one added", before, after)
				}
			}
			for i, n := range c.lens() {
				full[i] = n == limit
			}
			for i, f := range full {
				if !f {
					t.Errorf("shard %d holds %d denials after %d adds; want it full at %d", i, c.lens()[i], 40*size, limit)
				}
			}
		})
	}
}

// TestDenialCacheEvictsExpired: a full shard drops the expired denials
// among those it examines (up to evictProbes), keeps the live ones, and
// counts a denial expired at exactly its RetryAfter.
func TestDenialCacheEvictsExpired(t *testing.T) {
	t.Run("all expired, fewer than the probes", func(t *testing.T) {
		c := newBoundCache(t, 4)
		for i := range 4 {
			c.add("old"+strconv.Itoa(i), 10*time.Second)
		}
		c.clock.advance(10 * time.Second) // exactly their RetryAfter
		c.add("new", 10*time.Second)
		if n := c.lens()[0]; n != 1 {
			t.Fatalf("%d denials cached; want the 4 expired ones evicted and the new one kept", n)
		}
	})
	t.Run("expired and live", func(t *testing.T) {
		c := newBoundCache(t, 4)
		c.add("live0", time.Minute)
		c.add("old0", 5*time.Second)
		c.add("live1", time.Minute)
		c.add("old1", 5*time.Second)
		c.clock.advance(5 * time.Second)
		c.add("new", time.Minute)
		if n := c.lens()[0]; n != 3 {
			t.Fatalf("%d denials cached; want the 2 expired ones evicted", n)
		}
		for _, k := range []string{"live0", "live1", "new"} {
			if !c.has(k) {
				t.Errorf("live denial %s was evicted", k)
			}
		}
	})
	t.Run("not yet expired", func(t *testing.T) {
		c := newBoundCache(t, 4)
		for i := range 4 {
			c.add("k"+strconv.Itoa(i), 10*time.Second)
		}
		c.clock.advance(10*time.Second - 1)
		c.add("new", 10*time.Second)
		if n := c.lens()[0]; n != 4 {
			t.Fatalf("%d denials cached; want one of 4 live ones replaced", n)
		}
	})
	t.Run("at most evictProbes examined", func(t *testing.T) {
		c := newBoundCache(t, 3*evictProbes)
		for i := range 3 * evictProbes {
			c.add("old"+strconv.Itoa(i), time.Second)
		}
		c.clock.advance(time.Second)
		c.add("new", time.Second)
		if n, want := c.lens()[0], 3*evictProbes-evictProbes+1; n != want {
			t.Fatalf("%d denials cached; want %d: %d expired ones evicted, no more", n, want, evictProbes)
		}
	})
}

// TestDenialCacheSkipsDenialsWithoutWait: a denial with no RetryAfter is
// not cached (it would be over as soon as it is cached).
func TestDenialCacheSkipsDenialsWithoutWait(t *testing.T) {
	c := newBoundCache(t, 4)
	c.add("zero", 0)
	c.add("negative", -time.Second)
	if n := c.lens()[0]; n != 0 {
		t.Fatalf("%d denials cached; want none", n)
	}
	c.add("one", time.Nanosecond)
	if !c.has("one") {
		t.Fatal("a denial of 1ns was not cached")
	}
	c.clock.advance(time.Nanosecond)
	if c.has("one") {
		t.Fatal("a denial was served at its RetryAfter")
	}
}

// TestDenialCacheKeepsChecksApart: two checks that differ in one thing
// (cost, limit, window, burst, algorithm, rule name or key) are cached
// side by side: neither evicts the other, so each is served locally.
func TestDenialCacheKeepsChecksApart(t *testing.T) {
	base := testRule(t, "r")
	with := func(f func(*Rule)) Rule { r := base; f(&r); return r }
	tb := with(func(r *Rule) { r.Algorithm = TokenBucket })
	for _, tc := range []struct {
		name string
		a, b Hit
	}{
		{"cost", Hit{Rule: base, Key: "k", Cost: 1}, Hit{Rule: base, Key: "k", Cost: 2}},
		{"limit", Hit{Rule: base, Key: "k"}, Hit{Rule: with(func(r *Rule) { r.Limit = 6 }), Key: "k"}},
		{"window", Hit{Rule: base, Key: "k"}, Hit{Rule: with(func(r *Rule) { r.Window = 2 * time.Minute }), Key: "k"}},
		{"burst", Hit{Rule: tb, Key: "k"}, Hit{Rule: with(func(r *Rule) { r.Algorithm, r.Burst = TokenBucket, 7 }), Key: "k"}},
		{"algorithm", Hit{Rule: base, Key: "k"}, Hit{Rule: with(func(r *Rule) { r.Algorithm = FixedWindow }), Key: "k"}},
		{"rule name", Hit{Rule: base, Key: "k"}, Hit{Rule: with(func(r *Rule) { r.Name = "s" }), Key: "k"}},
		{"key", Hit{Rule: base, Key: "k"}, Hit{Rule: base, Key: "k2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &countingStore{answer: deny}
			l, _ := cachedLimiter(t, cs, 1000)
			for range 3 {
				for _, h := range []Hit{tc.a, tc.b} {
					if d, err := l.Check(context.Background(), h); err != nil || d.Allowed {
						t.Fatalf("Check = %+v, %v; want the store's denial", d, err)
					}
				}
			}
			if n := cs.count(); n != 2 {
				t.Fatalf("%d store calls for two checks denied three times each; want 2, the rest served by the cache", n)
			}
		})
	}
}
