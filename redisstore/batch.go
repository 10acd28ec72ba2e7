package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
)

// Group commit
//
// Concurrent Takes share script calls: take.lua checks several independent
// groups in one call, each all-or-nothing, in order. A batcher queues the
// Takes that arrive while a call is in flight and sends them together as
// the next call, so the number of script calls per second stays bounded by
// round trips, not by requests. There is no timer and no linger: a Take
// that finds its batcher idle is sent at once, alone, by its own goroutine
// and under its own context, so light load pays nothing for batching.
//
// On a Cluster there is one batcher per hash slot (one call can only touch
// one slot); on a standalone or Sentinel deployment, one batcher per store.
// A batch is at most maxBatchHits hits (and at least one Take, whatever its
// size). A failed or timed-out call is reported to every Take in it as an
// error wrapping floodgate.ErrStoreUnavailable, and is never retried: the
// script may have run. Each caller waits at most until its own context is
// done; a Take whose context ends before its batch is sent is dropped from
// the batch and so never recorded. A lease (floodgate.Hit.Lease, the
// Limiter's escrow) is a Take like any other here: a batch may carry
// several, each decided as its own call would be.

const (
	// maxBatchHits bounds the hits of one batched script call: a bigger
	// call keeps Redis busy longer (every other client waits for a
	// script) and holds its callers longer.
	maxBatchHits = 128
	// maxInflight is how many script calls a batcher may have in flight at
	// once: one being executed by Redis while the next is sent.
	maxInflight = 2
)

// Call states: a pending call is either sent (by the batch that claims it)
// or abandoned (by its caller, whose context ended first), never both.
const (
	callPending int32 = iota
	callSent
	callAbandoned
)

// call is one Take waiting in a batcher.
type call struct {
	keys     []string // the group's state keys
	args     []string // the group's epoch, 5 values per hit, and a lease's "L<us>" (take.lua)
	hits     int
	deadline time.Time // the caller's; every call has one (see Store.bound)
	state    atomic.Int32
	done     chan callResult // buffered: the batch never blocks on a caller that left
}

type callResult struct {
	res []floodgate.Result
	err error
}

// batcher queues the Takes of one slot.
type batcher struct {
	mu       sync.Mutex
	pending  []*call // guarded by mu; in arrival order
	inflight int     // guarded by mu; script calls in flight, at most maxInflight
}

// batchers holds a store's batchers: one for a standalone or Sentinel
// client, one per slot (created on first use) for a Cluster.
type batchers struct {
	params  sync.Map     // hitStringsKey -> *hitStrings
	nparams atomic.Int64 // entries stored in params, about
	single  batcher
	once    sync.Once
	slots   []atomic.Pointer[batcher] // 16384 on a Cluster
}

// of returns the batcher for keys, which share a slot, on a Cluster or
// not.
func (bs *batchers) of(cluster bool, keys []string) *batcher {
	if !cluster {
		return &bs.single
	}
	bs.once.Do(func() { bs.slots = make([]atomic.Pointer[batcher], 16384) })
	p := &bs.slots[keySlot(keys[0])]
	if b := p.Load(); b != nil {
		return b
	}
	p.CompareAndSwap(nil, new(batcher))
	return p.Load()
}

// take is the take of hits of one slot, through the group commit; a lease
// gets its Result.Lease and the stamp of its units' time. ctx has a
// deadline (Store.bound).
func (s *Store) take(ctx context.Context, t uint64, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if len(hits) == 0 {
		return nil, fmt.Errorf("redisstore: take: %w: no hits to check", floodgate.ErrInvalidHit)
	}
	// One backing array: the keys, then the script's arguments.
	buf := make([]string, 6*len(hits)+2)
	keys, args := buf[:0:len(hits)], buf[len(hits):len(hits)]
	keys, args, err := s.appendGroup(keys, args, "take", group{take: t, hits: hits})
	if err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	cluster := s.conn.Cluster()
	if cluster {
		if err := sameSlot(keys); err != nil {
			return nil, err
		}
	}
	lease := hits[0].Lease // algo.LeaseError: a lease is a take of one hit
	if lease != 0 {
		args = append(args, "L"+strconv.FormatInt(int64(lease/time.Microsecond), 10))
	}
	res, err := s.commit(ctx, s.batch.of(cluster, keys), keys, args, len(hits))
	if err == nil && lease != 0 && res[0].Allowed {
		r := &res[0]
		r.Lease = algo.LeaseOf(&hits[0], r.Stamp.At.UnixNano())
		if a := hits[0].Rule.Algorithm; a == floodgate.SlidingWindow || a == floodgate.TokenBucket {
			r.Stamp.At = r.Stamp.At.Add(lease) // recorded as at the lease's end
		}
	}
	return res, err
}

// commit runs the Take of keys and args (a group of hits, take.lua's
// arguments) through b: alone and at once when b is idle, else in the
// next batch.
func (s *Store) commit(ctx context.Context, b *batcher, keys, args []string, hits int) ([]floodgate.Result, error) {
	b.mu.Lock()
	if b.inflight < maxInflight && len(b.pending) == 0 {
		// Nothing waits: send this Take alone, now, under its own context.
		b.inflight++
		b.mu.Unlock()
		res, err := s.sendOne(ctx, keys, args, hits)
		s.next(b)
		return res, err
	}
	// Calls wait only while maxInflight calls are in flight (b.pending is
	// empty whenever b.inflight < maxInflight: next and drain give back a
	// slot only once nothing is pending), and the first of those to end
	// sends this one.
	cl := &call{keys: keys, args: args, hits: hits, done: make(chan callResult, 1)}
	cl.deadline, _ = ctx.Deadline()
	b.pending = append(b.pending, cl)
	b.mu.Unlock()
	select {
	case r := <-cl.done:
		return r.res, r.err
	case <-ctx.Done():
		if cl.state.CompareAndSwap(callPending, callAbandoned) {
			return nil, fmt.Errorf("redisstore: %w: %w (not sent)", floodgate.ErrStoreUnavailable, ctx.Err())
		}
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
	}
}

// claim removes the next batch from b.pending: the calls still pending, in
// order, up to maxBatchHits hits (and at least one call). b.mu must be
// held.
func (b *batcher) claim() []*call {
	var batch []*call
	hits, i := 0, 0
	for ; i < len(b.pending); i++ {
		cl := b.pending[i]
		if len(batch) > 0 && hits+cl.hits > maxBatchHits {
			break
		}
		if !cl.state.CompareAndSwap(callPending, callSent) {
			continue // its caller left
		}
		batch = append(batch, cl)
		hits += cl.hits
	}
	n := copy(b.pending, b.pending[i:])
	clear(b.pending[n:])
	b.pending = b.pending[:n]
	return batch
}

// next hands the batcher on when a call of its own ends: it starts a
// drainer for the calls that queued meanwhile, or gives back the slot.
func (s *Store) next(b *batcher) {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	batch := b.claim()
	b.mu.Unlock()
	go s.drain(b, batch)
}

// drain sends batches until nothing is pending, then gives back its slot
// of b.inflight.
func (s *Store) drain(b *batcher, batch []*call) {
	for {
		if len(batch) > 0 {
			s.deliver(batch)
		}
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.claim()
		b.mu.Unlock()
	}
}

// deliver sends a batch under the latest deadline of its callers and
// hands each caller its result or the batch's error.
func (s *Store) deliver(batch []*call) {
	var dl time.Time
	for _, cl := range batch {
		if cl.deadline.After(dl) {
			dl = cl.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	res, err := s.send(ctx, batch)
	cancel()
	for i, cl := range batch {
		if err != nil {
			cl.done <- callResult{err: err}
		} else {
			cl.done <- callResult{res: res[i]}
		}
	}
}

// sendOne runs a Take alone.
func (s *Store) sendOne(ctx context.Context, keys, args []string, hits int) ([]floodgate.Result, error) {
	v, err := s.eval(ctx, takeScript, keys, args)
	if err != nil {
		return nil, err
	}
	res, err := parseValues(v, []int{hits}, true)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return res[0], nil
}

// send runs the calls of a batch in one take script call.
func (s *Store) send(ctx context.Context, batch []*call) ([][]floodgate.Result, error) {
	sizes := make([]int, len(batch))
	for i, cl := range batch {
		sizes[i] = cl.hits
	}
	keys, args := batchArgs(batch)
	v, err := s.eval(ctx, takeScript, keys, args)
	if err != nil {
		return nil, err
	}
	res, err := parseValues(v, sizes, true)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return res, nil
}

// batchArgs returns the keys and take.lua's arguments of a batch: the
// calls' groups one after another, where a hit whose 5 values are those
// of the hit before it is sent as "=" (a batch of Takes of one rule and
// cost: 2 values a take instead of 6, which costs Redis less,
// BENCHMARKS.md).
func batchArgs(batch []*call) (keys, args []string) {
	n, m := 0, 0
	for _, cl := range batch {
		n += len(cl.keys)
		m += len(cl.args)
	}
	keys, args = make([]string, 0, n), make([]string, 0, m)
	var prev []string
	for _, cl := range batch {
		keys = append(keys, cl.keys...)
		args = append(args, cl.args[0]) // the epoch
		i := 1
		for ; i+5 <= len(cl.args); i += 5 {
			if hit := cl.args[i : i+5]; slices.Equal(hit, prev) {
				args = append(args, "=")
			} else {
				args = append(args, hit...)
				prev = hit
			}
		}
		args = append(args, cl.args[i:]...) // a lease's "L<us>"
	}
	return keys, args
}

// appendGroup appends the state keys of g's hits to keys and take.lua's
// arguments of g (its epoch, then 5 values per hit) to args.
// It rejects a group that names one key twice or that the scripts cannot
// compute exactly.
func (s *Store) appendGroup(keys, args []string, op string, g group) ([]string, []string, error) {
	if len(g.hits) == 0 {
		return nil, nil, fmt.Errorf("redisstore: %s: %w: no hits to check", op, floodgate.ErrInvalidHit)
	}
	epoch := "0" // a Peek creates no state
	if g.take != 0 {
		epoch = strconv.FormatUint(epochOf(g.take), 10)
	}
	args = append(args, epoch)
	first := len(keys)
	for i, h := range g.hits {
		p, err := s.paramStrings(h)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: %s: hit %d: %w", op, i, err)
		}
		k := s.tag(h.Rule.Name, h.Key) + p.suffix
		for j := first; j < len(keys); j++ {
			if keys[j] == k {
				return nil, nil, fmt.Errorf("redisstore: %s: %w: hits %d and %d name the same key under rule %s", op, floodgate.ErrInvalidHit, j-first, i, h.Rule.Name)
			}
		}
		keys = append(keys, k)
		over := "0"
		if h.Overdraw {
			over = "1"
		}
		args = append(args, p.alg, p.cost, p.a, p.b, over)
	}
	return keys, args, nil
}

// hitStrings are a hit's script arguments, formatted, and its state key's
// suffix.
type hitStrings struct {
	suffix, alg, cost, a, b string
}

type hitStringsKey struct {
	rule     floodgate.Rule
	cost     int64
	overdraw bool // which bounds the cost (params)
}

// maxCachedParams bounds the cache of formatted arguments, in case rules
// are made on the fly.
const maxCachedParams = 1024

// paramStrings returns the script arguments of h, formatted once per rule
// and cost.
func (s *Store) paramStrings(h floodgate.Hit) (*hitStrings, error) {
	k := hitStringsKey{h.Rule, h.Cost, h.Overdraw}
	if v, ok := s.batch.params.Load(k); ok {
		return v.(*hitStrings), nil
	}
	p, err := params(h)
	if err != nil {
		return nil, err
	}
	hs := &hitStrings{suffix: p.suffix, alg: p.alg, cost: strconv.FormatInt(p.cost, 10), a: strconv.FormatInt(p.a, 10), b: strconv.FormatInt(p.b, 10)}
	if s.batch.nparams.Add(1) <= maxCachedParams {
		s.batch.params.Store(k, hs)
	}
	return hs, nil
}
