// Package memstore keeps rate-limit state in the memory of one process. It
// is floodgate's embedded default: for a single replica, for tests, and as
// the per-replica fallback when a shared store is down. It implements the
// same semantics as the Redis store, to the nanosecond of an injected clock.
//
// State is sharded by key, over 64 independently locked shards, so that
// unrelated keys do not contend; a shard denies the token-bucket key it
// denied last again without its lock, so that a key under attack does
// not queue its callers on the lock either. Expired entries are collected every
// minute by one janitor goroutine per Store, which Close stops, and, in a
// shard that holds its share of Options.MaxKeys, by the check that needs
// room for a new key.
package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Now returns the current time. Nil means the system clock (read as
	// the wall time at New plus the monotonic time elapsed since, which is
	// cheaper than time.Now and immune to wall-clock steps). Tests inject
	// a fake clock here. The store's time never goes back: a check runs
	// at the later of Now and the latest time a check of its key ran at
	// (of any key of its shard, but for a denial decided without the
	// shard's lock), so a clock set back holds the keys at that time until
	// it catches up.
	Now func() time.Time
	// MaxKeys bounds the keys held, so that a flood of unique keys cannot
	// exhaust memory. At the bound, a check that needs a new key first
	// reclaims keys whose state no longer weighs (it would answer as a
	// fresh key's: a fixed window whose window ended, a token bucket
	// refilled, a counter whose next window ended, a log whose times all
	// left the window), earliest first, looking at no more than a few keys
	// per check whatever the store holds. If none can be, the check fails
	// with an error wrapping ErrFull and floodgate.ErrStoreUnavailable (the
	// caller's failure policy decides), while every key already held keeps
	// its state: a limit in force is never reset to make room. A key
	// weighs as long as its rule says: under a 5-per-day log, a day after
	// its last take. So a flood of distinct keys under day windows fills
	// the store for up to a day; size MaxKeys for the keys the long
	// windows hold. Peek and Refund never create keys, so they never fail
	// at the bound. Zero means 1,000,000 (a few hundred bytes each for
	// small limits, and 24 more for the order in which they stop
	// weighing); negative means no bound.
	//
	// The bound is enforced per shard: each of the 64 shards holds at
	// most MaxKeys/64 keys (rounded up), so the store may refuse a new
	// key while holding fewer than MaxKeys in all, when keys hash unevenly
	// onto the shards, and may hold up to 63 keys more than MaxKeys.
	MaxKeys int

	// shards is the number of shards, rounded up to a power of two, and
	// sweepInterval how often the janitor runs; zero means the package
	// doc's 64 and one minute. The tests set them (export_test.go).
	shards        int
	sweepInterval time.Duration
}

// ErrFull reports that a check needed a new key while the key's shard
// held its share of Options.MaxKeys, every one of them still weighing.
// The error returned wraps floodgate.ErrStoreUnavailable as well, so that
// the caller's failure policy answers; errors.Is(err, ErrFull) tells it
// apart from an outage, for a metric (package enforce counts it as
// floodgate_store_errors_total{reason="full"}).
var ErrFull = errors.New("memstore: full")

// defaultMaxKeys is the bound on keys when Options.MaxKeys is zero.
const defaultMaxKeys = 1_000_000

// Store is an in-memory [floodgate.Store]. It is safe for concurrent use.
// Call Close to stop its janitor goroutine.
type Store struct {
	now    func() time.Time // nil: base + monotonic time since
	base   time.Time
	baseNS int64
	seed   maphash.Seed
	shards []shard
	mask   uint64
	closed atomic.Bool
	// perShard is the most entries one shard holds (MaxKeys spread over
	// the shards).
	perShard int
	stop     chan struct{}
	done     chan struct{}
}

var (
	_ floodgate.LocalStore = (*Store)(nil)
)

type shard struct {
	mu sync.Mutex
	// entries holds the entries by their hashes (see table).
	entries table // guarded by mu
	// queue holds the entries, in a bounded store, in the order they stop
	// weighing, for a full shard to reclaim the first (see reclaim.go).
	queue []queued // guarded by mu
	// epochs is the last epoch given to an entry of this shard (a key
	// always lives in one shard, so its epochs never repeat). It starts
	// at a random value, so that another store's epochs (another
	// Limiter's, whose Decision a caller refunds here) match its own only
	// by a chance of about 2^-64: every store's would start at 1.
	epochs uint64 // guarded by mu
	// last is the latest time (Store.nowNS) a check of this shard ran at:
	// a check reads the clock before it locks the shard, and runs at the
	// later of the two, so that the shard's time never goes back.
	last int64 // guarded by mu
	// hint is the token-bucket key the shard denied last, whose denials
	// are decided without mu (see hint).
	hint hint
	// Rounds a shard to 192 bytes, three cache lines of the slice (a
	// large allocation, page-aligned): no line holds two shards' fields,
	// so one shard's lock is never written on the line of another's hint.
	_ [64]byte
}

// at returns the time a check of the shard that read the clock at now
// runs at: now, or the shard's last time if later. sh.mu must be held.
func (sh *shard) at(now int64) int64 {
	if now < sh.last {
		return sh.last
	}
	sh.last = now
	return now
}

// get returns the entry of k, whose hash is h, or nil. sh.mu must be held.
func (sh *shard) get(h uint64, k *entryKey) *entry { return sh.entries.get(h, k) }

// getOrCreate returns the entry of k, creating it if needed, or nil if the
// shard holds limit entries (limit > 0) and reclaiming found none that no
// longer weighs. An entry that has expired (it holds nothing that matters
// any more) starts afresh, with a new epoch. With hold, an entry created
// or restarted is safe from reclaiming until the check records into it or
// deletes it: a check of several hits needs that, since a later hit's
// getOrCreate may reclaim, while a check of one hit (TakeOne) reclaims
// only before it creates. sh.mu must be held.
func (sh *shard) getOrCreate(h uint64, k *entryKey, now int64, limit int, hold bool) *entry {
	if e := sh.get(h, k); e != nil {
		if e.expires <= now && e.epoch != 0 {
			e.restart(sh.nextEpoch())
			if limit > 0 && hold {
				// Without hold, the entry keeps its place: a lower bound
				// of its expiry still once the check records, after now.
				sh.enqueue(e, now+1) // not reclaimable under this check
			}
		}
		return e
	}
	return sh.create(h, k, now, limit)
}

// create is getOrCreate of a key the shard does not hold.
func (sh *shard) create(h uint64, k *entryKey, now int64, limit int) *entry {
	if limit > 0 && sh.entries.n >= limit && !sh.reclaim(now, limit) {
		return nil
	}
	e := &entry{epoch: sh.nextEpoch(), k: *k, hash: h}
	if !k.digest {
		// The caller's key may be a slice of a larger buffer (a
		// request's headers): keep a copy, not that buffer.
		e.k.key = strings.Clone(k.key)
	}
	sh.entries.put(e)
	if limit > 0 {
		sh.enqueue(e, now+1) // not reclaimable under this check
	}
	return e
}

// nextEpoch returns a new epoch for an entry of the shard, never zero
// (a stamp no take gave). sh.mu must be held.
func (sh *shard) nextEpoch() uint64 {
	if sh.epochs++; sh.epochs == 0 {
		sh.epochs++
	}
	return sh.epochs
}

// del removes e from the shard, if the shard holds it. sh.mu must be
// held.
func (sh *shard) del(e *entry) {
	if sh.hint.holds(e) {
		sh.hint.drop()
	}
	if sh.entries.remove(e) {
		sh.dequeue(e)
	}
}

// entryKey is a state's identity (floodgate.Store): the rule's name,
// algorithm and window, and the key, as in the Redis store's key layout.
// A key longer than keyenc.MaxPlain is held as its digest (digest set,
// so that no key held as is can equal a digest), which bounds the memory
// of a key at a few dozen bytes.
type entryKey struct {
	rule   string
	alg    floodgate.Algorithm
	digest bool
	window time.Duration
	key    string
}

// same reports whether k and o are one identity: k == o, with the fields
// that differ most often and cost least compared first (the generated
// equality compares in field order, and rule names are usually one
// string, which strings' equality checks by pointer first).
func (k *entryKey) same(o *entryKey) bool {
	return len(k.key) == len(o.key) && k.window == o.window && k.alg == o.alg && k.digest == o.digest &&
		k.key == o.key && k.rule == o.rule
}

func keyOf(h *floodgate.Hit) entryKey {
	if len(h.Key) > keyenc.MaxPlain {
		return digestKeyOf(&h.Rule, h.Key)
	}
	return entryKey{rule: h.Rule.Name, alg: h.Rule.Algorithm, window: h.Rule.Window, key: h.Key}
}

// digestKeyOf is keyOf of a key held as its digest, out of line so that
// keyOf inlines.
func digestKeyOf(r *floodgate.Rule, key string) entryKey {
	return entryKey{rule: r.Name, alg: r.Algorithm, window: r.Window, key: keyenc.Encode(key), digest: true}
}

// New returns a store and starts its janitor.
func New(opts Options) *Store {
	n := 64
	if opts.shards > 0 {
		n = 1
		for n < opts.shards {
			n <<= 1
		}
	}
	s := &Store{
		now:    opts.Now,
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if maxKeys := cmp.Or(opts.MaxKeys, defaultMaxKeys); maxKeys > 0 {
		s.perShard = (maxKeys + n - 1) / n
	}
	s.base = time.Now()
	s.baseNS = s.base.UnixNano()
	for i := range s.shards {
		s.shards[i].epochs = rand.Uint64()
		s.shards[i].last = math.MinInt64 // a clock (Options.Now) may be set before 1970
	}
	interval := opts.sweepInterval
	if interval <= 0 {
		interval = time.Minute
	}
	go s.janitor(interval)
	return s
}

// Close stops the janitor and makes every later call fail with
// floodgate.ErrClosed. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
		<-s.done
	}
	return nil
}

// Take implements [floodgate.Store]. It names each take by a counter of
// the state ([floodgate.Stamp.Take]).
func (s *Store) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if len(hits) == 1 {
		r, err := s.TakeOne(ctx, hits[0])
		if err != nil {
			return nil, err
		}
		return []floodgate.Result{r}, nil
	}
	if err := algo.LeaseError(hits); err != nil {
		return nil, fmt.Errorf("memstore: take: %w", err)
	}
	return s.apply(ctx, hits, true, func(now int64, slots []slot) []floodgate.Result {
		results := make([]floodgate.Result, len(hits))
		admitted := true // every hit that is not Overdraw is allowed
		for i := range hits {
			results[i] = slots[i].e.check(now, &hits[i], hitInterval(&hits[i]))
			admitted = admitted && (results[i].Allowed || hits[i].Overdraw)
		}
		if !admitted {
			return results
		}
		for i := range hits {
			var full bool
			if results[i].Stamp, full = slots[i].e.record(now, &hits[i], hitInterval(&hits[i])); full {
				slots[i].e.renew(s.shard(slots[i].hash).nextEpoch())
			}
		}
		return results
	})
}

// TakeOne implements [floodgate.LocalStore]: Take of one hit, which
// allocates nothing once the key is known (a sliding window's log grows
// by doubling, and reuses its room as entries leave the window).
func (s *Store) TakeOne(ctx context.Context, h floodgate.Hit) (r floodgate.Result, err error) {
	if err := s.usable(ctx); err != nil {
		return r, err
	}
	if h.Lease != 0 {
		if err := leaseError(&h); err != nil {
			return r, err
		}
	}
	err = s.take(&h.Rule, h.Key, &h, ruleIdentity(&h.Rule), hitInterval(&h), &r)
	return r, err
}

// TakeFunc returns TakeOne of a hit of cost 1 under rule, which must be
// valid, as a function of its key (of 1 byte to 1 MiB, as every method's
// hits: see [floodgate.Store]): [floodgate.Limiter.Prepare] calls it
// once per rule it prepares (see [floodgate.LocalStore]). The function
// decides as TakeOne does, to the nanosecond, but computes once what
// the rule alone makes of each decision: its part of the state's hash
// and a token bucket's emission interval.
func (s *Store) TakeFunc(rule floodgate.Rule) func(ctx context.Context, key string) (floodgate.Result, error) {
	id, t := ruleIdentity(&rule), hitInterval(&floodgate.Hit{Rule: rule})
	// A closure, not a method value: one call less per decision.
	return func(ctx context.Context, key string) (r floodgate.Result, err error) {
		if err := s.usable(ctx); err != nil {
			return r, err
		}
		err = s.take(&rule, key, nil, id, t, &r)
		return r, err
	}
}

// take is TakeOne, on a usable store, of *h, whose rule and key are *rule
// and key, or, when h is nil, of a hit of cost 1 under *rule to key,
// neither Overdraw nor a lease (a prepared rule's), written into *r,
// which is zero. id is ruleIdentity(rule) and t the hit's hitInterval,
// which a prepared rule computes once.
func (s *Store) take(rule *floodgate.Rule, key string, h *floodgate.Hit, id uint64, t int64, r *floodgate.Result) error {
	var k entryKey // keyOf, inlined, field by field: a literal is built aside and copied
	if len(key) > keyenc.MaxPlain {
		k = digestKeyOf(rule, key)
	} else {
		k.rule, k.alg, k.window, k.key = rule.Name, rule.Algorithm, rule.Window, key
	}
	hash := keyenc.KeyIdentity(s.seed, id, k.key) // s.hash(&k)
	sh := s.shard(hash)
	now := s.nowNS() // before the lock: the critical section is the check alone
	plain := rule.Algorithm == floodgate.TokenBucket && (h == nil || !h.Overdraw && h.Lease == 0)
	cost, capacity := int64(1), rule.Capacity()*t
	if h != nil {
		cost = h.Cost
	}
	if plain && sh.hint.denies(hash, &k, now, cost, t, capacity, r, s.now != nil) {
		return nil
	}
	sh.mu.Lock()
	now = sh.at(now)
	// getOrCreate without hold, inlined.
	e := sh.get(hash, &k)
	hinted := e != nil && sh.hint.holds(e)
	if hinted {
		now = max(now, sh.hint.at.Load())
		sh.last = now
	}
	if e == nil {
		if e = sh.create(hash, &k, now, s.perShard); e == nil {
			sh.mu.Unlock()
			return s.full()
		}
	} else if e.expires <= now && e.epoch != 0 {
		e.restart(sh.nextEpoch())
	}
	switch {
	case !plain:
		if h == nil {
			one := floodgate.Hit{Rule: *rule, Key: key, Cost: 1}
			h = &one
		}
		if *r = e.check(now, h, t); r.Allowed || h.Overdraw {
			var full bool
			if r.Stamp, full = e.record(now, h, t); full {
				e.renew(sh.nextEpoch())
			}
			if h.Lease != 0 {
				r.Lease = algo.LeaseOf(h, now)
			}
		}
	default: // the common case, in one pass
		if e.takeBucket(r, now, cost, t, capacity); !r.Allowed && e.tat > now {
			sh.hint.set(e, now)
			hinted = false
		}
	}
	if hinted {
		sh.hint.drop() // the take may have moved the TAT
	}
	if e.expires <= now {
		sh.del(e)
	}
	sh.mu.Unlock()
	return nil
}

// leaseError is TakeOne's error for a lease that h may not take, or nil;
// out of line, so that TakeOne's frame stays small.
//
//go:noinline
func leaseError(h *floodgate.Hit) error {
	if err := algo.LeaseError([]floodgate.Hit{*h}); err != nil {
		return fmt.Errorf("memstore: take: %w", err)
	}
	return nil
}

// Peek implements [floodgate.Store]. A key the store does not hold is
// peeked as fresh, and is not created.
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.apply(ctx, hits, false, func(now int64, slots []slot) []floodgate.Result {
		results := make([]floodgate.Result, len(hits))
		for i := range hits {
			results[i] = slots[i].e.check(now, &hits[i], hitInterval(&hits[i]))
		}
		return results
	})
}

// Refund implements [floodgate.Store]. A key the store does not hold
// has nothing to refund, and is not created. It finds the takes by their
// stamps, so that it is idempotent per receipt.
func (s *Store) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	hits := make([]floodgate.Hit, len(receipts))
	for i, r := range receipts {
		hits[i] = r.Hit
	}
	_, err := s.apply(ctx, hits, false, func(now int64, slots []slot) []floodgate.Result {
		for i := range receipts {
			slots[i].e.refund(now, &receipts[i].Hit, receipts[i].Stamp)
		}
		return nil
	})
	return err
}

// Renew implements [floodgate.Store]. Like Refund, it finds the leases
// by their stamps, and creates no key.
func (s *Store) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	hits := make([]floodgate.Hit, len(receipts))
	for i, r := range receipts {
		hits[i] = r.Hit
	}
	stamps := make([]floodgate.Stamp, len(receipts))
	_, err := s.apply(ctx, hits, false, func(now int64, slots []slot) []floodgate.Result {
		for i := range receipts {
			stamps[i] = slots[i].e.renewLease(now, &receipts[i].Hit, receipts[i].Stamp)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return stamps, nil
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	k := keyOf(&floodgate.Hit{Rule: rule, Key: key})
	h := s.hash(&k)
	sh := s.shard(h)
	sh.mu.Lock()
	if e := sh.get(h, &k); e != nil {
		sh.del(e)
	}
	sh.mu.Unlock()
	return nil
}

// nowNS returns the store's time in Unix nanoseconds.
func (s *Store) nowNS() int64 {
	if s.now != nil {
		return s.now().UnixNano()
	}
	return s.baseNS + int64(time.Since(s.base))
}

func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("memstore: %w", floodgate.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return nil
}

// slot is what apply finds for one hit: its key, hash and entry.
type slot struct {
	k    entryKey
	hash uint64
	e    *entry
	held bool // whether e is in the store
}

// apply locks the shards of hits in index order (so that concurrent
// multi-key calls cannot deadlock), finds their entries, and runs f on them
// at one instant. With create, it creates the entries it does not find (and
// fails with ErrFull at the bound); without, f gets a fresh entry that the
// store does not keep for each key it does not hold.
func (s *Store) apply(ctx context.Context, hits []floodgate.Hit, create bool, f func(now int64, slots []slot) []floodgate.Result) ([]floodgate.Result, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	slots := make([]slot, len(hits))
	var buf [8]uint64
	locked := buf[:0] // the shards to lock, in order
	for i := range hits {
		slots[i].k = keyOf(&hits[i])
		slots[i].hash = s.hash(&slots[i].k)
		locked = append(locked, slots[i].hash&s.mask)
	}
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer s.unlock(locked)
	now := s.nowNS()
	for _, i := range locked {
		now = max(now, s.shards[i].last)
	}
	for i := range slots {
		sl := &slots[i]
		sh := s.shard(sl.hash)
		if !create {
			if sl.e = sh.get(sl.hash, &sl.k); sl.e != nil {
				sl.held = true
			} else {
				sl.e = &entry{}
			}
			continue
		}
		if sl.e = sh.getOrCreate(sl.hash, &sl.k, now, s.perShard, true); sl.e == nil {
			// Leave no empty entry behind for the hits before this one.
			for _, prev := range slots[:i] {
				if prev.e.expires <= now {
					s.shard(prev.hash).del(prev.e)
				}
			}
			return nil, s.full()
		}
		sl.held = true
	}
	for i := range slots {
		// f may change the state: a take decided from the hint must not
		// see it after, nor the key's time go back behind the hint's.
		if sl, sh := &slots[i], s.shard(slots[i].hash); sl.held && sh.hint.holds(sl.e) {
			now = max(now, sh.hint.at.Load())
			sh.hint.drop()
		}
	}
	for _, i := range locked {
		s.shards[i].last = now
	}
	results := f(now, slots)
	// Drop entries that hold nothing, such as those of a denied or peeked
	// first hit, so that probing keys does not grow the map.
	for i := range slots {
		if sl := &slots[i]; sl.held && sl.e.expires <= now {
			s.shard(sl.hash).del(sl.e)
		}
	}
	return results, nil
}

// unlock unlocks the shards of indexes locked.
func (s *Store) unlock(locked []uint64) {
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
}

// hash hashes k once, for both its shard (the low bits) and the shard's
// map.
func (s *Store) hash(k *entryKey) uint64 { return identity(s.seed, k) }

// ruleIdentity is the rule's part of its states' hashes.
func ruleIdentity(r *floodgate.Rule) uint64 {
	return keyenc.RuleIdentity(r.Name, uint8(r.Algorithm), r.Window)
}

func identity(seed maphash.Seed, k *entryKey) uint64 {
	return keyenc.Identity(seed, k.rule, uint8(k.alg), k.window, k.key)
}

func (s *Store) shard(h uint64) *shard { return &s.shards[h&s.mask] }

func (s *Store) janitor(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep deletes every entry that has expired.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(sh.at(s.nowNS()))
		sh.mu.Unlock()
	}
}

// sweep deletes the shard's expired entries. sh.mu must be held.
func (sh *shard) sweep(now int64) {
	slots := sh.entries.slots
	for i := 0; i < len(slots); {
		if e := slots[i].e; e != nil && e.expires <= now {
			// Removing shifts a later entry into slot i, if any: look at
			// it again. (One shifted from the start of the slots to the
			// end, past the wrap, was looked at already: no harm.)
			sh.del(e)
			continue
		}
		i++
	}
}

// full returns the error of a check refused at the bound.
func (s *Store) full() error {
	return fmt.Errorf("%w: %d keys held, none reclaimable: %w", ErrFull, s.perShard*len(s.shards), floodgate.ErrStoreUnavailable)
}
