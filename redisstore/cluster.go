package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
)

// Checks across Redis Cluster slots.
//
// One script can touch the keys of one slot only. A check whose hits
// live in several slots (login by IP and by account) is therefore taken
// slot by slot, in ascending slot order, under one take name (takename.go):
//
//  1. reserve: the take script runs on the first slot's hits, all or
//     nothing. If it allows them, the next slot follows; if it denies,
//     the slots after it are only peeked, for the decision's figures.
//  2. roll back: once a slot denies (or fails), the slots already taken
//     are refunded by each hit's stamp, which carries the take's name. The
//     refund script is idempotent (a tombstone per take name), so a roll-back may
//     be retried; and it credits only what provably remains of the take,
//     so a retry after a window boundary credits nothing. A slot whose
//     take failed (it may have run) has no stamp, and is left to expire;
//     nor does a roll-back credit an overdraw hit that carried its key
//     past what its state holds (floodgate.Hit.Overdraw).
//
// Each slot's script enforces its keys' limits atomically and counts the
// reservations of checks in flight, so no key ever admits more than its
// limit. The cost is the opposite error: while a reservation lives (from
// its slot's script until its roll-back, about one round trip), it holds
// one unit of its keys' quota, and another check of those keys may be
// denied that an oracle would have allowed. If the roll-back fails
// (Redis unreachable, the process dies between the phases), the
// reservation stays until it expires by itself: a sliding-window entry
// leaves the window, a token bucket refills the cost, a fixed window
// ends. A failed roll-back is retried in the background for as long as
// that (at most maxRollbackRetry), until the store is closed.
//
// The ascending order is what keeps the bound tight under contention. A
// check denied by its first slot writes nothing anywhere, and the last
// slot is the commit point: a reservation there is never rolled back. With
// two slots, a key that is the last slot of the checks that use it fills
// only with admitted requests, and a key that is their first slot is
// denied only while the checks holding it are about to commit or to be
// rolled back because the other key is full. That is why 1,000 concurrent
// logins over 4 IPs (limit 10) and one account (limit 5) admit exactly 5
// on a Cluster, not fewer.

// maxBackgroundRollbacks bounds the roll-backs retried in the background
// at once, and maxRollbackRetry how long one is retried; past them, a
// reservation that could not be rolled back is left to expire by itself.
const (
	maxBackgroundRollbacks = 1024
	maxRollbackRetry       = 15 * time.Minute
)

// rollbacks runs the roll-backs retried in the background.
type rollbacks struct {
	mu      sync.Mutex
	ctx     context.Context    // guarded by mu; canceled by shutdown, background roll-backs run under it
	cancel  context.CancelFunc // guarded by mu
	stopped bool               // guarded by mu; no more background roll-backs
	bg      sync.WaitGroup
	queued  atomic.Int64 // background roll-backs running
}

// background runs f in a goroutine under a context that shutdown cancels,
// and reports false if the store is shutting down and f will not run.
func (x *rollbacks) background(f func(ctx context.Context)) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return false
	}
	if x.ctx == nil {
		x.ctx, x.cancel = context.WithCancel(context.Background())
	}
	ctx := x.ctx
	x.bg.Go(func() { f(ctx) })
	return true
}

// shutdown stops the background roll-backs and waits for them.
func (x *rollbacks) shutdown() {
	x.mu.Lock()
	x.stopped = true
	if x.cancel != nil {
		x.cancel()
	}
	x.mu.Unlock()
	x.bg.Wait()
}

// slotGroup is the hits of one check that live in one Cluster slot.
type slotGroup struct {
	slot uint16
	idx  []int // positions of the hits in the check
	hits []floodgate.Hit
}

// slotGroups returns hits grouped by Cluster slot in ascending slot order
// when the store runs on a Cluster and the hits span two slots or more;
// otherwise nil, and the hits go to one script.
func (s *Store) slotGroups(hits []floodgate.Hit) []slotGroup {
	if len(hits) < 2 || !s.conn.Cluster() {
		return nil
	}
	var groups []slotGroup
	for i, h := range hits {
		slot := keySlot(s.tag(h.Rule.Name, h.Key))
		j := slices.IndexFunc(groups, func(g slotGroup) bool { return g.slot == slot })
		if j < 0 {
			j = len(groups)
			groups = append(groups, slotGroup{slot: slot})
		}
		groups[j].idx = append(groups[j].idx, i)
		groups[j].hits = append(groups[j].hits, h)
	}
	if len(groups) < 2 {
		return nil
	}
	slices.SortFunc(groups, func(a, b slotGroup) int { return cmp.Compare(a.slot, b.slot) })
	return groups
}

// takeSlots takes a check of n hits whose groups live in different slots:
// reserve slot by slot, roll back on a denial or a failure.
func (s *Store) takeSlots(ctx context.Context, t uint64, groups []slotGroup, n int) ([]floodgate.Result, error) {
	out := make([]floodgate.Result, n)
	var taken []floodgate.Receipt // what the slots before this one recorded
	for i, g := range groups {
		res, err := s.take(ctx, t, g.hits) // one slot: one script
		named(res, t)
		if err == nil && len(res) != len(g.hits) {
			err = fmt.Errorf("redisstore: %w: %d results for %d hits", floodgate.ErrStoreUnavailable, len(res), len(g.hits))
		}
		if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
			// Refused before any script ran on slot i.
			s.rollback(ctx, taken)
			return nil, err
		}
		if err != nil {
			// The slots before i recorded; slot i may have (a script
			// that timed out may still have run), but without its reply
			// there is no stamp to refund it by, and a refund of a take
			// that never happened would credit someone else's: its state
			// is left to expire (over-denial, never over-admission).
			s.rollback(ctx, taken)
			return nil, err
		}
		for j, r := range res {
			out[g.idx[j]] = r
		}
		if !admitted(g.hits, res) {
			var wg sync.WaitGroup
			wg.Go(func() { s.rollback(ctx, taken) })
			for _, rest := range groups[i+1:] {
				wg.Go(func() { s.peekInto(ctx, rest, out) })
			}
			wg.Wait()
			return out, nil
		}
		for j, r := range res {
			taken = append(taken, floodgate.Receipt{Hit: g.hits[j], Stamp: r.Stamp})
		}
	}
	return out, nil
}

// peekInto fills out with the results of g's hits for a check that
// another slot denied. It cannot fail the decision, which is a denial
// whatever g says: if Redis does not answer, g's hits are reported
// allowed with nothing remaining.
func (s *Store) peekInto(ctx context.Context, g slotGroup, out []floodgate.Result) {
	res, err := s.peek(ctx, g.hits)
	for j := range g.hits {
		if err == nil && len(res) == len(g.hits) {
			out[g.idx[j]] = res[j]
		} else {
			out[g.idx[j]] = floodgate.Result{Allowed: true}
		}
	}
}

// rollback refunds what a check took before it was denied or failed
// (Refund splits it by slot), and hands a failed refund to the
// background.
func (s *Store) rollback(ctx context.Context, taken []floodgate.Receipt) {
	if len(taken) == 0 {
		return
	}
	err := s.refundAll(ctx, taken)
	if err == nil || errors.Is(err, floodgate.ErrClosed) {
		return
	}
	if s.roll.queued.Add(1) > maxBackgroundRollbacks {
		s.roll.queued.Add(-1)
		return
	}
	if !s.roll.background(func(ctx context.Context) {
		defer s.roll.queued.Add(-1)
		s.retryRollback(ctx, taken)
	}) {
		s.roll.queued.Add(-1)
	}
}

// retryRollback retries a refund with a growing pause until it succeeds,
// the store closes, the reservation has expired by itself anyway, or
// maxRollbackRetry has passed. The receipts carry the takes' server times,
// so a retry after a window boundary credits nothing to the new window.
func (s *Store) retryRollback(ctx context.Context, taken []floodgate.Receipt) {
	until := time.Now().Add(min(reservationLife(taken), maxRollbackRetry))
	pause := 50 * time.Millisecond
	for time.Now().Before(until) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		call, cancel := context.WithTimeout(ctx, s.callTO)
		err := s.refundAll(call, taken)
		cancel()
		if err == nil || errors.Is(err, floodgate.ErrClosed) {
			return
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// reservationLife is the longest time a take can weigh on the state of
// the receipts' keys.
func reservationLife(taken []floodgate.Receipt) time.Duration {
	var d time.Duration
	for _, r := range taken {
		d = max(d, algo.Life(r.Hit.Rule, r.Hit.Cost))
	}
	return d
}

// admitted reports whether the script recorded a slot's hits: each is
// allowed, or an overdraw hit (floodgate.Hit.Overdraw).
func admitted(hits []floodgate.Hit, res []floodgate.Result) bool {
	for i, r := range res {
		if !r.Allowed && !hits[i].Overdraw {
			return false
		}
	}
	return true
}

// peekSlots peeks at each slot's hits concurrently and combines the
// results in the check's order.
func (s *Store) peekSlots(ctx context.Context, groups []slotGroup, n int) ([]floodgate.Result, error) {
	out := make([]floodgate.Result, n)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			res, err := s.peek(ctx, g.hits)
			if err == nil && len(res) != len(g.hits) {
				err = fmt.Errorf("redisstore: %w: %d results for %d hits", floodgate.ErrStoreUnavailable, len(res), len(g.hits))
			}
			if err != nil {
				errs[i] = err
				return
			}
			for j, r := range res {
				out[g.idx[j]] = r
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// refundSlots refunds each slot's receipts concurrently. A refund is
// idempotent, so a caller may retry the whole call after an error.
func (s *Store) refundSlots(ctx context.Context, receipts []floodgate.Receipt, groups []slotGroup) error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		rs := make([]floodgate.Receipt, len(g.idx))
		for j, k := range g.idx {
			rs[j] = receipts[k]
		}
		wg.Go(func() { errs[i] = s.refund(ctx, rs) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
