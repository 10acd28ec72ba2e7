// Package memstore keeps rate-limit state in the memory of one process. It
// is floodgate's embedded default: for a single replica, for tests, and as
// the per-replica fallback when a shared store is down. It implements the
// same semantics as the Redis store, to the nanosecond of an injected clock.
//
// State is sharded by key so that unrelated keys do not contend. Expired
// entries are collected by one janitor goroutine per Store, which Close
// stops.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Now returns the current time. Nil means time.Now. Tests inject a fake
	// clock here.
	Now func() time.Time
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 64.
	Shards int
	// SweepInterval is how often expired entries are collected. Zero means
	// one minute.
	SweepInterval time.Duration
}

// Store is an in-memory [floodgate.Store]. It is safe for concurrent use.
// Call Close to stop its janitor goroutine.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []shard
	mask   uint64
	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

var _ floodgate.Store = (*Store)(nil)

type shard struct {
	mu      sync.Mutex
	entries map[entryKey]*entry // guarded by mu
	_       [40]byte            // keeps two shards' locks off one cache line
}

// entryKey separates the state of rules with different names or
// algorithms on the same key, as the Redis store's key layout does.
type entryKey struct {
	rule string
	alg  floodgate.Algorithm
	key  string
}

// New returns a store and starts its janitor.
func New(opts Options) *Store {
	n := 64
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
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
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[entryKey]*entry)
	}
	interval := opts.SweepInterval
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

// Len returns the number of keys held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Take implements [floodgate.Store].
func (s *Store) Take(ctx context.Context, id string, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.apply(ctx, hits, func(now int64, es []*entry) []floodgate.Result {
		results := make([]floodgate.Result, len(hits))
		allowed := true
		for i, h := range hits {
			results[i] = es[i].check(now, h)
			allowed = allowed && results[i].Allowed
		}
		if !allowed {
			return results
		}
		for i, h := range hits {
			es[i].record(now, id, h)
		}
		return results
	})
}

// Peek implements [floodgate.Store].
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.apply(ctx, hits, func(now int64, es []*entry) []floodgate.Result {
		results := make([]floodgate.Result, len(hits))
		for i, h := range hits {
			results[i] = es[i].check(now, h)
		}
		return results
	})
}

// Refund implements [floodgate.Store].
func (s *Store) Refund(ctx context.Context, id string, hits []floodgate.Hit) error {
	_, err := s.apply(ctx, hits, func(now int64, es []*entry) []floodgate.Result {
		for i, h := range hits {
			es[i].refund(now, id, h)
		}
		return nil
	})
	return err
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	k := entryKey{rule: rule.Name, alg: rule.Algorithm, key: keyenc.Encode(key)}
	sh := &s.shards[s.shardOf(k)]
	sh.mu.Lock()
	delete(sh.entries, k)
	sh.mu.Unlock()
	return nil
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

// apply locks the shards of hits in index order (so that concurrent
// multi-key calls cannot deadlock), finds or creates their entries, and
// runs f on them at one instant.
func (s *Store) apply(ctx context.Context, hits []floodgate.Hit, f func(now int64, es []*entry) []floodgate.Result) ([]floodgate.Result, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	keys := make([]entryKey, len(hits))
	idx := make([]uint64, len(hits))
	for i, h := range hits {
		keys[i] = entryKey{rule: h.Rule.Name, alg: h.Rule.Algorithm, key: keyenc.Encode(h.Key)}
		idx[i] = s.shardOf(keys[i])
	}
	locked := slices.Clone(idx)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()
	now := s.now().UnixNano()
	es := make([]*entry, len(hits))
	for i, k := range keys {
		m := s.shards[idx[i]].entries
		e := m[k]
		if e == nil {
			e = &entry{}
			m[k] = e
		}
		es[i] = e
	}
	results := f(now, es)
	// Drop entries that hold nothing, such as those of a denied or peeked
	// first hit, so that probing keys does not grow the map.
	for i, k := range keys {
		if es[i].expires <= now {
			delete(s.shards[idx[i]].entries, k)
		}
	}
	return results, nil
}

func (s *Store) shardOf(k entryKey) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.rule)
	h.WriteByte(byte(k.alg))
	h.WriteString(k.key)
	return h.Sum64() & s.mask
}

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
		now := s.now().UnixNano()
		for k, e := range sh.entries {
			if e.expires <= now {
				delete(sh.entries, k)
			}
		}
		sh.mu.Unlock()
	}
}
