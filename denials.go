package floodgate

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// The denial cache (Options.DenialCacheSize)
//
// A denied check is remembered under a hash of its hits until the
// shortest RetryAfter among its denied hits, counted from the moment the
// store call was sent: a cached denial ends no later than the store's own
// would, and while it lasts every hit it reports denied is still denied
// (a hit whose own wait ran out would be reported allowed by the store,
// so the cached decision ends with the first such wait). Entries are
// verified against the hits they were made for, so a hash collision
// costs a store call, never a wrong decision.
//
// Refund and Reset must clear the denials of the keys they touch, even
// denials of checks still in flight. Rather than index entries by key, the
// cache keeps a generation counter per slot of key identities (rule name,
// algorithm, key): Refund and Reset bump the slot of each key they touch,
// every entry records the sum of its keys' slots as they were before its
// store call was sent, and an entry whose sum has moved is stale. Two
// keys that share a slot only cost extra store calls.

const (
	denialShards = 16
	genSlots     = 1024
	// evictProbes is how many entries a full shard examines to find an
	// expired one before it evicts an arbitrary one.
	evictProbes = 8
)

type denialCache struct {
	shards   []denialShard
	perShard int
	seed     maphash.Seed
	gens     [genSlots]atomic.Uint64
	// now reads the local monotonic clock in nanoseconds; tests replace
	// it.
	now func() int64
}

type denialShard struct {
	mu sync.Mutex
	m  map[uint64]*denial // guarded by mu; keyed by probe.key
	_  [48]byte           // keeps two shards' locks off one cache line
}

// denial is one cached denial.
type denial struct {
	hits  []Hit
	d     Decision
	sent  int64  // when the store call was sent
	until int64  // sent + the shortest RetryAfter of a denied hit
	gen   uint64 // the sum of the hits' generations before sending
}

// probe is what the cache needs of a check: its key in the map and the
// current sum of its keys' generations.
type probe struct {
	key, gen uint64
}

func newDenialCache(size int) *denialCache {
	n := denialShards
	if size < 4*denialShards {
		n = 1
	}
	c := &denialCache{shards: make([]denialShard, n), perShard: size / n, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*denial)
	}
	start := time.Now()
	c.now = func() int64 { return int64(time.Since(start)) }
	return c
}

// clock returns the cache's time, or 0 without a cache.
func (c *denialCache) clock() int64 {
	if c == nil {
		return 0
	}
	return c.now()
}

// identity hashes the key of a hit: what a store keeps one state for.
func (c *denialCache) identity(r Rule, key string) uint64 {
	return keyenc.Identity(c.seed, r.Name, uint8(r.Algorithm), r.Window, key)
}

// probe computes the map key and generation sum of a check.
func (c *denialCache) probe(hits []Hit) probe {
	var p probe
	for _, h := range hits {
		id := c.identity(h.Rule, h.Key)
		p.gen += c.gens[id%genSlots].Load()
		x := id ^ uint64(h.cost())*0xff51afd7ed558ccd ^ uint64(h.Rule.Limit)*0xc4ceb9fe1a85ec53 ^
			uint64(h.Rule.Window)*0x94d049bb133111eb ^ uint64(h.Rule.Burst)*0xbf58476d1ce4e5b9
		p.key = (p.key^x)*0x100000001b3 + 1
	}
	return p
}

func (c *denialCache) shard(p probe) *denialShard {
	return &c.shards[(p.key>>32)%uint64(len(c.shards))]
}

// get returns the cached denial of hits, its durations counted down to
// now, if there is one that is still in force.
func (c *denialCache) get(p probe, hits []Hit) (Decision, bool) {
	sh := c.shard(p)
	sh.mu.Lock()
	e := sh.m[p.key]
	if e == nil {
		sh.mu.Unlock()
		return Decision{}, false
	}
	if !sameHits(e.hits, hits) { // another check with the same hash
		sh.mu.Unlock()
		return Decision{}, false
	}
	now := c.now()
	if now >= e.until || e.gen != p.gen { // expired, or cleared since
		delete(sh.m, p.key)
		sh.mu.Unlock()
		return Decision{}, false
	}
	d, sent := e.d, e.sent
	sh.mu.Unlock()
	elapsed := time.Duration(now - sent)
	countDown(&d, elapsed)
	if d.Each != nil {
		each := make([]Decision, len(d.Each))
		copy(each, d.Each)
		for i := range each {
			countDown(&each[i], elapsed)
		}
		d.Each = each
	}
	return d, true
}

// countDown moves d's durations elapsed later.
func countDown(d *Decision, elapsed time.Duration) {
	d.RetryAfter = max(0, d.RetryAfter-elapsed)
	d.ResetAfter = max(0, d.ResetAfter-elapsed)
}

func sameHits(a, b []Hit) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Rule != b[i].Rule || a[i].Key != b[i].Key || a[i].cost() != b[i].cost() || a[i].Overdraw != b[i].Overdraw {
			return false
		}
	}
	return true
}

// add caches the denial d of hits, whose store call was sent at sent, when
// the check was probed as p.
func (c *denialCache) add(p probe, hits []Hit, d Decision, sent int64) {
	if d.Allowed {
		return
	}
	for i := range hits {
		if hits[i].Rule.Algorithm == Concurrency {
			// A slot frees when its holder releases it, on any replica:
			// no wait is known.
			return
		}
	}
	wait := d.RetryAfter
	for _, h := range d.Each {
		if !h.Allowed {
			wait = min(wait, h.RetryAfter)
		}
	}
	if wait <= 0 {
		return
	}
	e := &denial{hits: append([]Hit(nil), hits...), d: d, sent: sent, until: sent + int64(wait), gen: p.gen}
	if d.Each != nil {
		e.d.Each = append([]Decision(nil), d.Each...)
	}
	sh := c.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[p.key]; !ok && len(sh.m) >= sh.capacity(c) {
		sh.evict(c.now())
	}
	sh.m[p.key] = e
}

func (sh *denialShard) capacity(c *denialCache) int { return max(1, c.perShard) }

// evict removes the expired entries among a few, or else the first of
// them. sh.mu must be held.
func (sh *denialShard) evict(now int64) {
	var first uint64
	n, removed := 0, false
	for k, e := range sh.m {
		if n == 0 {
			first = k
		}
		if now >= e.until {
			delete(sh.m, k)
			removed = true
		}
		if n++; n == evictProbes {
			break
		}
	}
	if !removed {
		delete(sh.m, first)
	}
}

// clear makes every cached denial that involves key under rule stale. It
// is a no-op without a cache.
func (c *denialCache) clear(r Rule, key string) {
	if c == nil {
		return
	}
	c.gens[c.identity(r, key)%genSlots].Add(1)
}
