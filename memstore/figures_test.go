package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// fig is every figure of one hit's answer that becomes a header.
type fig struct {
	allowed      bool
	remaining    int64
	reset, retry time.Duration
}

func figOf(r floodgate.Result) fig { return fig{r.Allowed, r.Remaining, r.ResetAfter, r.RetryAfter} }

// rig is a memstore on a fake clock that takes one hit at a time, alone
// (TakeOne's path) or beside a companion hit that is always allowed (the
// multi-key path), so that both paths are held to the same figures.
type rig struct {
	t     *testing.T
	s     *memstore.Store
	clock *storetest.FakeClock
	multi bool
}

func newRig(t *testing.T, multi bool, opts memstore.Options) *rig {
	t.Helper()
	clock := storetest.NewFakeClock()
	opts.Now = clock.Now
	s := memstore.New(opts)
	t.Cleanup(func() { s.Close() })
	return &rig{t: t, s: s, clock: clock, multi: multi}
}

// forBothPaths runs f with a rig of each path.
func forBothPaths(t *testing.T, f func(t *testing.T, g *rig)) {
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi=%v", multi), func(t *testing.T) {
			t.Parallel()
			f(t, newRig(t, multi, memstore.Options{}))
		})
	}
}

func mustRule(t *testing.T, limit int64, window time.Duration, alg floodgate.Algorithm, burst int64) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule("fig", limit, window, alg)
	if err == nil && burst > 0 {
		r.Burst = burst
		err = r.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// take takes h as a new take, returning its result.
func (g *rig) take(h floodgate.Hit) floodgate.Result {
	g.t.Helper()
	hits := []floodgate.Hit{h}
	if g.multi {
		companion, _ := floodgate.NewRule("companion", 1_000_000, time.Hour, floodgate.FixedWindow)
		hits = append(hits, floodgate.Hit{Rule: companion, Key: "c", Cost: 1})
	}
	res, err := g.s.Take(context.Background(), hits)
	if err != nil || len(res) != len(hits) {
		g.t.Fatalf("Take: %v, %v", res, err)
	}
	if g.multi && !res[1].Allowed {
		g.t.Fatalf("the companion hit was denied: %+v", res[1])
	}
	return res[0]
}

// expect takes h after advancing the clock by d and compares every figure.
func (g *rig) expect(step string, d time.Duration, h floodgate.Hit, want fig) floodgate.Result {
	g.t.Helper()
	g.clock.Advance(d)
	r := g.take(h)
	if got := figOf(r); got != want {
		g.t.Fatalf("%s: take of cost %d: got %+v, want %+v", step, h.Cost, got, want)
	}
	return r
}

// peek compares every figure of a Peek of h.
func (g *rig) peek(step string, h floodgate.Hit, want fig) {
	g.t.Helper()
	res, err := g.s.Peek(context.Background(), []floodgate.Hit{h})
	if err != nil {
		g.t.Fatal(err)
	}
	if got := figOf(res[0]); got != want {
		g.t.Fatalf("%s: peek of cost %d: got %+v, want %+v", step, h.Cost, got, want)
	}
}

func (g *rig) refund(h floodgate.Hit, id string, st floodgate.Stamp) {
	g.t.Helper()
	if err := g.s.Refund(context.Background(), []floodgate.Receipt{{Hit: h, Stamp: st}}); err != nil {
		g.t.Fatal(err)
	}
}

// TestTokenBucketFigures: 4 per 4s is one token a second (T = 1s) and a
// capacity of 4. Remaining is what the capacity leaves of the debt after
// the hit, ResetAfter the debt, RetryAfter the debt beyond the capacity.
func TestTokenBucketFigures(t *testing.T) {
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 4, 4*time.Second, floodgate.TokenBucket, 0), Key: "k"}
		s := time.Second
		h.Cost = 1
		g.expect("fresh", 0, h, fig{true, 3, 1 * s, 0})
		h.Cost = 3
		g.expect("to the capacity", 0, h, fig{true, 0, 4 * s, 0})
		h.Cost = 1
		g.expect("over it", 0, h, fig{false, 0, 4 * s, 1 * s})
		h.Cost = 2
		g.expect("1.5s later, 2 over 1.5 free", 1500*time.Millisecond, h, fig{false, 1, 2500 * time.Millisecond, 500 * time.Millisecond})
		h.Cost = 1
		g.expect("one fits", 0, h, fig{true, 0, 3500 * time.Millisecond, 0})
		g.peek("then", h, fig{false, 0, 3500 * time.Millisecond, 500 * time.Millisecond})
	})
}

// TestTokenBucketBurstFigures: a burst raises the capacity, not the rate.
func TestTokenBucketBurstFigures(t *testing.T) {
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 1, time.Second, floodgate.TokenBucket, 3), Key: "k", Cost: 3}
		g.expect("the burst", 0, h, fig{true, 0, 3 * time.Second, 0})
		h.Cost = 3
		g.expect("another burst", 0, h, fig{false, 0, 3 * time.Second, 3 * time.Second})
		h.Cost = 1
		g.expect("a second later", time.Second, h, fig{true, 0, 3 * time.Second, 0})
	})
}

// TestFixedWindowFigures: 3 per 10s, windows aligned on the epoch (the
// fake clock starts on a boundary). A denial reports the count so far and
// the window's end, for both ResetAfter and RetryAfter.
func TestFixedWindowFigures(t *testing.T) {
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 3, 10*time.Second, floodgate.FixedWindow, 0), Key: "k", Cost: 2}
		s := time.Second
		g.expect("2s in", 2*s, h, fig{true, 1, 8 * s, 0})
		g.expect("over", 0, h, fig{false, 1, 8 * s, 8 * s})
		h.Cost = 1
		g.expect("the last", 0, h, fig{true, 0, 8 * s, 0})
		g.expect("full", 3*s, h, fig{false, 0, 5 * s, 5 * s})
		h.Cost = 3
		g.expect("next window", 5*s, h, fig{true, 0, 10 * s, 0})
		g.expect("its end", 10*s-1, h, fig{false, 0, 1, 1})
	})
}

// TestSlidingWindowCounterFigures: 4 per 10s. With p and c the previous
// and current windows' counts, t into the current window, the weight of
// p is ceil(p*(W-t)/W). Allowed hits are full again two windows from the
// current one's start; a denial's ResetAfter is that too while the current
// window counts, else the current window's end; RetryAfter is when the
// weight has fallen enough, in this window or the next.
func TestSlidingWindowCounterFigures(t *testing.T) {
	s := time.Second
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 4, 10*time.Second, floodgate.SlidingWindowCounter, 0), Key: "k", Cost: 3}
		g.expect("fresh", 0, h, fig{true, 1, 20 * s, 0})
		h.Cost = 2
		// Next window: 3*(W-t)/W + 2 <= 4 once t >= W/3 (rounded up).
		g.expect("over", 0, h, fig{false, 1, 20 * s, 10*s + 3333333334})
		h.Cost = 1
		// 12s: t = 2s, weight ceil(3*8/10) = 3.
		g.expect("next window", 12*s, h, fig{true, 0, 18 * s, 0})
		// weight 3 + 1 + 1 > 4 until ceil(3*(W-t)/W) <= 2: t >= W/3.
		g.expect("over again", 0, h, fig{false, 0, 18 * s, 3333333334 - 2*s})
	})
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 4, 10*time.Second, floodgate.SlidingWindowCounter, 0), Key: "k", Cost: 4}
		g.expect("all at once", 0, h, fig{true, 0, 20 * s, 0})
		// 11s: only the previous window counts, weight ceil(4*9/10) = 4.
		h.Cost = 1
		g.expect("previous only", 11*s, h, fig{false, 0, 9 * s, 1500 * time.Millisecond})
		// A cost equal to the limit waits for the previous window to
		// weigh nothing: its end.
		h.Cost = 4
		g.expect("cost = limit", 0, h, fig{false, 0, 9 * s, 9 * s})
		// A cost of 3 needs a weight of 1: ceil(4*(W-t)/W) <= 1 from 7.5s.
		g.peek("cost 3", floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 3}, fig{false, 0, 9 * s, 6500 * time.Millisecond})
	})
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 4, 10*time.Second, floodgate.SlidingWindowCounter, 0), Key: "k", Cost: 1}
		g.expect("one", 0, h, fig{true, 3, 20 * s, 0})
		// A cost equal to the limit with the current window counting
		// waits for the next window's end: the count of 1 must weigh
		// nothing.
		h.Cost = 4
		g.expect("cost = limit", 4*s, h, fig{false, 3, 16 * s, 16 * s})
	})
}

// TestRefundAtEveryOffset takes at several offsets into a window and
// refunds at several delays, within the window and across its end: a
// fixed window or a counter credits the cost back iff the take and the
// refund share a window, a token bucket credits what time has not yet
// paid back of the take, max(0, cost*T - age).
func TestRefundAtEveryOffset(t *testing.T) {
	const w = 10 * time.Second
	offsets := []time.Duration{0, 1, w / 4, w / 2, w - 1}
	delays := []time.Duration{0, 1, w / 4, w / 2, w - 1, w, w + 1, 3 * w / 2, 2 * w}
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.TokenBucket} {
		for _, off := range offsets {
			for _, delay := range delays {
				t.Run(fmt.Sprintf("%v/at %v/after %v", alg, off, delay), func(t *testing.T) {
					t.Parallel()
					refundAt(t, alg, off, delay)
				})
			}
		}
	}
}

func refundAt(t *testing.T, alg floodgate.Algorithm, off, delay time.Duration) {
	const w = 10 * time.Second
	g := newRig(t, false, memstore.Options{})
	// A token bucket of 5 per 10s has T = 2s.
	r := mustRule(t, 5, w, alg, 0)
	h := floodgate.Hit{Rule: r, Key: "k", Cost: 2}
	other := floodgate.Hit{Rule: r, Key: "k", Cost: 1}
	g.clock.Advance(off)
	a := g.take(h) // the take refunded
	g.take(other)  // one that stays
	if !a.Allowed {
		t.Fatalf("take: %+v", a)
	}
	g.clock.Advance(delay)
	before := peekOne(t, g.s, other)
	g.refund(h, "take-1", a.Stamp)
	after := peekOne(t, g.s, other)
	g.refund(h, "take-1", a.Stamp) // idempotent
	again := peekOne(t, g.s, other)
	if again != after {
		t.Fatalf("a second refund changed %+v into %+v", after, again)
	}
	switch alg {
	case floodgate.TokenBucket:
		// T = 2s: the take weighs 4s and the other one 2s more. A
		// refund moves the TAT back by what time has not yet paid of
		// the take, not before now; a peek of cost 1 then adds T.
		credit := max(0, 4*time.Second-delay)
		debt := max(0, 6*time.Second-delay)
		if want := max(0, debt-credit) + 2*time.Second; after.ResetAfter != want {
			t.Fatalf("refund %v after the take: peek %+v, want ResetAfter %v (a credit of %v)", delay, after, want, credit)
		}
	default:
		same := (off+delay)/w == 0
		want := before.Remaining
		if same {
			want += 2
		}
		if after.Remaining != want {
			t.Fatalf("refund %v after a take at %v (same window: %v): Remaining %d → %d, want %d", delay, off, same, before.Remaining, after.Remaining, want)
		}
	}
}

func peekOne(t *testing.T, s *memstore.Store, h floodgate.Hit) floodgate.Result {
	t.Helper()
	res, err := s.Peek(context.Background(), []floodgate.Hit{h})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestRefundIsRememberedUntilItCouldNoLongerCredit: a refund done is
// remembered, through the refunds of other takes that clean the memory,
// for as long as a second refund of the same take could credit anything:
// to the window's end, or until a token bucket's credit has run out.
func TestRefundIsRememberedUntilItCouldNoLongerCredit(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, false, memstore.Options{})
			// 10 per 10s: a token bucket has T = 1s.
			h := floodgate.Hit{Rule: mustRule(t, 10, 10*time.Second, alg, 0), Key: "k", Cost: 3}
			g.clock.Advance(time.Second)
			var stamps []floodgate.Stamp
			for range 3 {
				stamps = append(stamps, g.take(h).Stamp)
			}
			// A fourth take, never refunded, keeps the count (or the
			// debt) above what a refund credits: a refund credited twice
			// cannot hide behind the floor at zero.
			if r := g.take(floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 1}); !r.Allowed {
				t.Fatalf("the fourth take: %+v", r)
			}
			// Each refund cleans the memory of what can no longer credit;
			// take-1's refund must stay remembered through them, and a
			// second one change nothing.
			g.refund(h, "take-1", stamps[0])
			g.refund(h, "take-2", stamps[1])
			once := peekOne(t, g.s, floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 1})
			g.refund(h, "take-1", stamps[0])
			if got := peekOne(t, g.s, floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 1}); got != once {
				t.Fatalf("take-1 refunded again after take-2's refund: %+v, then %+v", once, got)
			}
			// 2s later take-1's refund could still credit (its window
			// goes on; a token bucket's 3s credit has 1s left).
			g.clock.Advance(2 * time.Second)
			g.refund(h, "take-3", stamps[2])
			mid := peekOne(t, g.s, floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 1})
			g.refund(h, "take-1", stamps[0])
			if got := peekOne(t, g.s, floodgate.Hit{Rule: h.Rule, Key: "k", Cost: 1}); got != mid {
				t.Fatalf("take-1 refunded again 2s later: %+v, then %+v", mid, got)
			}
		})
	}
}

// TestFullStoreLeavesNoEntryBehind: a multi-key Take that fails at the
// MaxKeys bound on its second hit must not keep the entry it created for
// the first, which would hold a slot and nothing else until a check
// reclaimed it.
func TestFullStoreLeavesNoEntryBehind(t *testing.T) {
	g := newRig(t, false, memstore.Tuned(memstore.Options{MaxKeys: 2}, 1, 0))
	ctx := context.Background()
	r := mustRule(t, 5, time.Minute, floodgate.FixedWindow, 0)
	takeKeys := func(keys ...string) error {
		hits := make([]floodgate.Hit, len(keys))
		for i, k := range keys {
			hits[i] = floodgate.Hit{Rule: r, Key: k, Cost: 1}
		}
		_, err := g.s.Take(ctx, hits)
		return err
	}
	if err := takeKeys("held", "filler"); err != nil {
		t.Fatal(err)
	}
	if err := takeKeys("x"); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("a third key: %v, want ErrFull", err)
	}
	if err := g.s.Reset(ctx, r, "filler"); err != nil { // room for one
		t.Fatal(err)
	}
	if err := takeKeys("new-1", "new-2"); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("a Take of two new keys with room for one: %v, want ErrFull", err)
	}
	if n := g.s.Len(); n != 1 {
		t.Fatalf("Len = %d after the failed Take; want 1, the key held before", n)
	}
	if err := takeKeys("new-3"); err != nil {
		t.Fatalf("a new key with room for it: %v", err)
	}
}

// TestMaxKeysPerShard: MaxKeys is spread over the shards, rounded up: 10
// keys over 4 shards is 3 a shard, 12 in all, whatever the keys' hashes
// (2000 keys fill every shard). A negative MaxKeys holds any number of
// keys.
func TestMaxKeysPerShard(t *testing.T) {
	r := mustRule(t, 5, time.Minute, floodgate.FixedWindow, 0)
	for _, tc := range []struct {
		shards, maxKeys, want int
	}{
		{4, 10, 12},
		{4, 12, 12},
		{1, 7, 7},
		{3, 5, 8}, // 3 shards round up to 4: 2 a shard
		{1, -1, 2000},
		{0, 100, 128}, // the default of 64 shards: 2 a shard
	} {
		t.Run(fmt.Sprintf("%d shards, MaxKeys %d", tc.shards, tc.maxKeys), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, false, memstore.Tuned(memstore.Options{MaxKeys: tc.maxKeys}, tc.shards, 0))
			var full error
			for i := range 2000 {
				if _, err := g.s.Take(context.Background(), []floodgate.Hit{{Rule: r, Key: fmt.Sprint(i), Cost: 1}}); err != nil {
					full = err
				}
			}
			if n := g.s.Len(); n != tc.want {
				t.Fatalf("Len = %d after 2000 keys; want %d", n, tc.want)
			}
			if tc.maxKeys > 0 && (full == nil || !strings.Contains(full.Error(), fmt.Sprintf(" %d keys held", tc.want))) {
				t.Fatalf("the refusal: %v; want ErrFull naming the %d keys held", full, tc.want)
			}
		})
	}
}

// TestExpiredEntryStartsANewState: a key's entry that has expired but is
// still in the map starts a state with an epoch that none of the key's
// earlier states had, so a refund of a take from an earlier state (here
// one before a Reset, whose token-bucket credit outlives the state that
// followed it) credits nothing.
func TestExpiredEntryStartsANewState(t *testing.T) {
	g := newRig(t, false, memstore.Options{})
	ctx := context.Background()
	r := mustRule(t, 1, time.Second, floodgate.TokenBucket, 3)
	a := g.take(floodgate.Hit{Rule: r, Key: "k", Cost: 3}) // weighs 3s
	if err := g.s.Reset(ctx, r, "k"); err != nil {
		t.Fatal(err)
	}
	g.take(floodgate.Hit{Rule: r, Key: "k", Cost: 1}) // a new state, expiring in 1s
	g.clock.Advance(time.Second)
	g.expect("the expired state's entry reused", 0, floodgate.Hit{Rule: r, Key: "k", Cost: 1}, fig{true, 2, time.Second, 0})
	g.refund(floodgate.Hit{Rule: r, Key: "k", Cost: 3}, "take-1", a.Stamp) // 2s of credit, for a state that is gone
	g.peek("after the refund", floodgate.Hit{Rule: r, Key: "k", Cost: 1}, fig{true, 1, 2 * time.Second, 0})
}

// TestSlidingWindowLimitChangedOnAFullRing: a rule's limit changes (a
// deploy) while its ring is full or wrapped, and the ring keeps the times
// that matter, in order: 60s windows, one take a second.
func TestSlidingWindowLimitChangedOnAFullRing(t *testing.T) {
	s := time.Second
	forBothPaths(t, func(t *testing.T, g *rig) {
		// Raised on a wrapped ring: 3, then 5.
		three := floodgate.Hit{Rule: mustRule(t, 3, time.Minute, floodgate.SlidingWindow, 0), Key: "up", Cost: 1}
		five := floodgate.Hit{Rule: mustRule(t, 5, time.Minute, floodgate.SlidingWindow, 0), Key: "up", Cost: 1}
		g.expect("0s", 0, three, fig{true, 2, time.Minute, 0})
		g.expect("1s", s, three, fig{true, 1, time.Minute, 0})
		g.expect("2s", s, three, fig{true, 0, time.Minute, 0})
		g.expect("61s: 0s has left, the ring wraps", 59*s, three, fig{true, 1, time.Minute, 0}) // 1s, 2s, 61s
		g.expect("62s, limit 5", s, five, fig{true, 3, time.Minute, 0})                         // 2s has left
		five.Cost = 3
		g.expect("62s, 3 more", 0, five, fig{true, 0, time.Minute, 0}) // 61s, 62s x4
		five.Cost = 1
		g.expect("63s, full", s, five, fig{false, 0, 59 * s, 58 * s})
		g.peek("63s, cost 2", floodgate.Hit{Rule: five.Rule, Key: "up", Cost: 2}, fig{false, 0, 59 * s, 59 * s})
	})
	forBothPaths(t, func(t *testing.T, g *rig) {
		// Lowered on a full ring: 5, then 3.
		five := floodgate.Hit{Rule: mustRule(t, 5, time.Minute, floodgate.SlidingWindow, 0), Key: "down", Cost: 1}
		three := floodgate.Hit{Rule: mustRule(t, 3, time.Minute, floodgate.SlidingWindow, 0), Key: "down", Cost: 1}
		for i := range int64(5) {
			g.expect(fmt.Sprintf("%ds", i), min(time.Duration(i), 1)*s, five, fig{true, 4 - i, time.Minute, 0})
		}
		// Five live times against a limit of 3: the third oldest (2s)
		// must leave before one more fits, and Remaining tells the two
		// too many (floodgate.Result.Remaining).
		g.expect("10s, limit 3", 6*s, three, fig{false, -2, 54 * s, 52 * s})
		g.expect("62s", 52*s, three, fig{true, 0, time.Minute, 0})     // 3s, 4s, 62s
		g.expect("63s", s, three, fig{true, 0, time.Minute, 0})        // 4s, 62s, 63s
		g.expect("63s, full", 0, three, fig{false, 0, time.Minute, s}) // 4s leaves at 64s
		g.expect("64s", s, three, fig{true, 0, time.Minute, 0})
	})
}
