package rlqs

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Ledger records the shares of a bucket's limit that the replicas have
// assigned, so that their sum never exceeds the limit (the package doc's
// Invariant). [NewMemLedger] keeps it in one process, [NewRedisLedger]
// in Redis for a fleet of replicas. Its methods are safe for concurrent
// use.
type Ledger interface {
	// Grant records holder's claim on bucket and returns what it may
	// assign now (see [GrantRequest]).
	Grant(ctx context.Context, req GrantRequest) (Grant, error)
}

// GrantRequest is one holder's claim on one bucket. A holder is one
// stream's view of one bucket: one Envoy.
type GrantRequest struct {
	// Bucket names the limit and bucket: every holder of one bucket
	// shares one capacity. At most 128 bytes.
	Bucket string
	// Holder names the stream, unique across the fleet.
	Holder string
	// Capacity is the bucket's limit in units per window: the sum of
	// every share in force never exceeds it.
	Capacity int64
	// Demand is what the holder claims, in the same units; it counts in
	// the max-min fair division until TTL after this call. Zero withdraws
	// the holder from the division (a stream that ended) while its grants
	// stay counted until they expire. Negative means not measured yet (a
	// new Envoy): the holder claims an equal split of the capacity among
	// the bucket's holders, itself included, out of what is free; the
	// other holders' fair shares leave such a claim out, so that no share
	// is lowered for a demand nobody has measured.
	Demand int64
	// Keep is the share the holder has in force; a fair share within
	// Hysteresis of it grants Keep again (when it fits), so that an
	// assignment is re-sent unchanged and Envoy keeps its token bucket.
	Keep, Hysteresis int64
	// TTL is how long the grant can be in force: the assignment's
	// time to live and the bound on its delivery. The grant counts in the
	// sum until TTL after the ledger's clock read at the call.
	TTL time.Duration
}

// Grant is what a [Ledger] granted.
type Grant struct {
	// Share is what the holder may assign until TTL from now: at most
	// its fair share, at most the capacity the other holders' grants
	// leave free.
	Share int64
	// Fair is the holder's max-min fair share of the capacity over the
	// live demands.
	Fair int64
}

// entry is one grant: a share counted until exp (µs).
type entry struct{ share, exp int64 }

// holding is one holder's state in a bucket: its demand until demandExp
// and its grants not yet expired, newest last, each share larger than
// every later one's (an older grant no larger than a newer one is
// dominated and dropped).
type holding struct {
	demand, demandExp int64
	provisional       bool // demand is an equal split, not measured
	grants            []entry
}

// held returns the largest share of h still counted at now.
func (h *holding) held(now int64) int64 {
	var m int64
	for _, e := range h.grants {
		if e.exp > now && e.share > m {
			m = e.share
		}
	}
	return m
}

// fairShare divides capacity max-min fairly over demands: the smallest
// are met in full, and what is left is split equally among the larger
// (integer units, rounded down). It returns the level: each demand d gets
// min(d, level). grant.lua computes the same.
func fairShare(capacity int64, demands []int64) int64 {
	ds := slices.Clone(demands)
	slices.Sort(ds)
	left, n := capacity, int64(len(ds))
	for _, d := range ds {
		level := left / n
		if d > level {
			return level
		}
		left -= d
		n--
	}
	return capacity // every demand met
}

// grant applies req to a bucket's holdings at now (µs): the one
// algorithm of every Ledger, which grant.lua repeats in Lua.
func grant(hs map[string]*holding, req GrantRequest, now int64) Grant {
	ttl := req.TTL.Microseconds()
	for k, h := range hs {
		h.grants = slices.DeleteFunc(h.grants, func(e entry) bool { return e.exp <= now })
		if h.demandExp <= now {
			h.demand = 0
		}
		if len(h.grants) == 0 && h.demand == 0 && k != req.Holder {
			delete(hs, k)
		}
	}
	me := hs[req.Holder]
	if me == nil {
		me = &holding{}
		hs[req.Holder] = me
	}
	demand := req.Demand
	if demand < 0 {
		demand = req.Capacity / int64(len(hs))
	}
	me.demand, me.demandExp, me.provisional = demand, now+ttl, req.Demand < 0
	var demands []int64
	var others int64
	for k, h := range hs {
		if h.demand > 0 && (k == req.Holder || !h.provisional) {
			demands = append(demands, h.demand)
		}
		if k != req.Holder {
			others += h.held(now)
		}
	}
	var fair int64
	if demand > 0 {
		fair = min(demand, fairShare(req.Capacity, demands))
	}
	want := fair
	if req.Keep > 0 && abs(fair-req.Keep) <= req.Hysteresis {
		want = req.Keep
	}
	share := max(0, min(want, req.Capacity-others))
	if share > 0 {
		me.grants = slices.DeleteFunc(me.grants, func(e entry) bool { return e.share <= share })
		me.grants = append(me.grants, entry{share, now + ttl})
	}
	if len(me.grants) == 0 && me.demand == 0 {
		delete(hs, req.Holder)
	}
	return Grant{Share: share, Fair: fair}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// MemLedger is a [Ledger] in this process's memory: for one replica, and
// for tests. Its buckets are forgotten once every grant and demand in
// them has expired.
type MemLedger struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]map[string]*holding // guarded by mu
	sweep   time.Time                      // guarded by mu: the last sweep of expired buckets
}

// NewMemLedger returns a MemLedger reading time from now (nil means
// time.Now).
func NewMemLedger(now func() time.Time) *MemLedger {
	if now == nil {
		now = time.Now
	}
	return &MemLedger{now: now, buckets: map[string]map[string]*holding{}}
}

// Grant implements [Ledger].
func (l *MemLedger) Grant(_ context.Context, req GrantRequest) (Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.now()
	now := t.UnixMicro()
	if t.Sub(l.sweep) > time.Minute {
		l.sweep = t
		for b, hs := range l.buckets {
			if b != req.Bucket && live(hs, now) == 0 {
				delete(l.buckets, b)
			}
		}
	}
	hs := l.buckets[req.Bucket]
	if hs == nil {
		hs = map[string]*holding{}
		l.buckets[req.Bucket] = hs
	}
	g := grant(hs, req, now)
	if len(hs) == 0 {
		delete(l.buckets, req.Bucket)
	}
	return g, nil
}

// Held returns the sum of the shares of bucket counted now: what may be
// in force at once. It is at most every capacity granted against.
func (l *MemLedger) Held(bucket string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return live(l.buckets[bucket], l.now().UnixMicro())
}

func live(hs map[string]*holding, now int64) int64 {
	var sum int64
	for _, h := range hs {
		sum += h.held(now)
	}
	return sum
}
