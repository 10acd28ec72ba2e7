package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestSlidingWindowFigures: 3 per 10s. A request leaves the window
// exactly W after it was admitted; a denial waits for the oldest requests
// that must leave, and is fully reset when the newest has left.
func TestSlidingWindowFigures(t *testing.T) {
	s := time.Second
	forBothPaths(t, func(t *testing.T, g *rig) {
		h := floodgate.Hit{Rule: mustRule(t, 3, 10*s, floodgate.SlidingWindow, 0), Key: "k", Cost: 2}
		g.expect("fresh", 0, h, fig{true, 1, 10 * s, 0})
		h.Cost = 1
		g.expect("4s later", 4*s, h, fig{true, 0, 10 * s, 0})
		h.Cost = 2
		g.expect("over", 0, h, fig{false, 0, 10 * s, 6 * s})
		g.expect("a nanosecond early", 6*s-1, h, fig{false, 0, 4*s + 1, 1})
		g.expect("the first two have left", 1, h, fig{true, 0, 10 * s, 0})
	})
}

// TestWindowsBefore1970: windows are aligned on the Unix epoch on both of
// its sides, also for a clock set before 1970 (Options.Now may be any
// clock): the fixed window that holds -15s is [-20s, -10s).
func TestWindowsBefore1970(t *testing.T) {
	s := time.Second
	before := func(g *rig) { g.clock.Advance(-time.Duration(g.clock.Now().UnixNano()) - 15*s) }
	forBothPaths(t, func(t *testing.T, g *rig) {
		before(g)
		h := floodgate.Hit{Rule: mustRule(t, 3, 10*s, floodgate.FixedWindow, 0), Key: "k", Cost: 3}
		g.expect("-15s", 0, h, fig{true, 0, 5 * s, 0})
		g.expect("full", 0, h, fig{false, 0, 5 * s, 5 * s})
		g.expect("-10s: the next window", 5*s, h, fig{true, 0, 10 * s, 0})
	})
	forBothPaths(t, func(t *testing.T, g *rig) {
		before(g)
		h := floodgate.Hit{Rule: mustRule(t, 4, 10*s, floodgate.SlidingWindowCounter, 0), Key: "k", Cost: 3}
		g.expect("-15s", 0, h, fig{true, 1, 15 * s, 0})
		// -8s: 2s into the next window, the weight is ceil(3*8/10) = 3.
		h.Cost = 1
		g.expect("-8s", 7*s, h, fig{true, 0, 18 * s, 0})
	})
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String()+"/refund", func(t *testing.T) {
			g := newRig(t, false, memstore.Options{})
			before(g)
			h := floodgate.Hit{Rule: mustRule(t, 3, 10*s, alg, 0), Key: "k", Cost: 1}
			a := g.take(h)
			g.clock.Advance(4 * s) // -11s: the same window
			g.refund(h, "take-1", a.Stamp)
			if r := peekOne(t, g.s, h); r.Remaining != 2 {
				t.Fatalf("a refund in the take's window: Remaining %d, want 2", r.Remaining)
			}
			b := g.take(h)
			g.clock.Advance(s) // -10s: the next window
			g.refund(h, "take-2", b.Stamp)
			if r := peekOne(t, g.s, h); alg == floodgate.FixedWindow && r.Remaining != 2 {
				t.Fatalf("a refund in the next window: Remaining %d, want 2 (the new window's count is 0)", r.Remaining)
			}
		})
	}
}

// TestPeekAtExpiryDropsTheEntry: an entry that has expired, to the
// nanosecond, holds nothing, and a Peek or a Refund that finds it drops
// it.
func TestPeekAtExpiryDropsTheEntry(t *testing.T) {
	for _, op := range []string{"peek", "refund"} {
		t.Run(op, func(t *testing.T) {
			g := newRig(t, false, memstore.Options{})
			h := floodgate.Hit{Rule: mustRule(t, 3, 10*time.Second, floodgate.FixedWindow, 0), Key: "k", Cost: 1}
			a := g.take(h)
			g.clock.Advance(10*time.Second - 1)
			peekOne(t, g.s, h)
			if n := g.s.Len(); n != 1 {
				t.Fatalf("Len = %d a nanosecond before the window's end; want 1", n)
			}
			g.clock.Advance(1)
			if op == "peek" {
				peekOne(t, g.s, h)
			} else {
				g.refund(h, "take-1", a.Stamp)
			}
			if n := g.s.Len(); n != 0 {
				t.Fatalf("Len = %d after a %s at the window's end; want 0", n, op)
			}
		})
	}
}

// TestSystemClock: without Options.Now the store's time is the system's
// (read as a monotonic offset from New), as a stamp shows.
func TestSystemClock(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	h := floodgate.Hit{Rule: mustRule(t, 3, time.Minute, floodgate.FixedWindow, 0), Key: "k", Cost: 1}
	time.Sleep(10 * time.Millisecond)
	before := time.Now()
	res, err := s.Take(context.Background(), []floodgate.Hit{h})
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if at := res[0].Stamp.At; at.Before(before.Add(-time.Millisecond)) || at.After(after.Add(time.Millisecond)) {
		t.Fatalf("stamp %v; want the system's time, between %v and %v", at, before, after)
	}
}

// TestTimeNeverGoesBack: a check runs at the latest time its shard has
// seen, so that a clock read before another check's took the lock (or a
// clock, Options.Now, set back) neither starts a window again nor moves
// a bucket's figures back.
func TestTimeNeverGoesBack(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		alg         floodgate.Algorithm
		back        time.Duration
		first, want fig // want: of the check after the clock went back, as at the time before
	}{
		{floodgate.FixedWindow, time.Nanosecond, fig{true, 0, 10 * s, 0}, fig{false, 0, 10 * s, 10 * s}},
		{floodgate.SlidingWindowCounter, time.Nanosecond, fig{true, 0, 20 * s, 0}, fig{false, 0, 20 * s, 20 * s}},
		{floodgate.TokenBucket, 5 * s, fig{true, 0, 10 * s, 0}, fig{false, 0, 10 * s, 10 * s}},
		{floodgate.SlidingWindow, 5 * s, fig{true, 0, 10 * s, 0}, fig{false, 0, 10 * s, 10 * s}},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			forBothPaths(t, func(t *testing.T, g *rig) {
				// At the start of a window, which the clock then leaves backwards.
				g.clock.Advance(10*s - time.Duration(g.clock.Now().UnixNano()%int64(10*s)))
				h := floodgate.Hit{Rule: mustRule(t, 1, 10*s, tc.alg, 0), Key: "k", Cost: 1}
				g.expect("at a window's start", 0, h, tc.first)
				g.expect("the clock set back", -tc.back, h, tc.want)
			})
		})
	}
}

// TestHintedDenialsKeepTheKeysTime follows a token-bucket key through
// the denials that a shard decides without its lock (the hint of the key
// it denied last) and a clock set back: every check of the key runs at
// the latest time one ran at, whether it was decided from the hint,
// under the lock (a rule of a larger burst, which shares the key's
// state, is admitted), after the hint was dropped, or in a Peek.
func TestHintedDenialsKeepTheKeysTime(t *testing.T) {
	s := time.Second
	forBothPaths(t, func(t *testing.T, g *rig) {
		small := floodgate.Hit{Rule: mustRule(t, 1, 10*s, floodgate.TokenBucket, 2), Key: "k", Cost: 1}
		large := floodgate.Hit{Rule: mustRule(t, 1, 10*s, floodgate.TokenBucket, 3), Key: "k", Cost: 1}
		fill := small
		fill.Cost = 2
		g.expect("the bucket filled", 0, fill, fig{true, 0, 20 * s, 0})
		g.expect("denied under the lock", s, small, fig{false, 0, 19 * s, 9 * s})
		g.expect("denied again", 8*s, small, fig{false, 0, 11 * s, s})
		g.expect("the clock set back", -7*s, small, fig{false, 0, 11 * s, s})
		g.expect("a larger burst admitted", 0, large, fig{true, 0, 21 * s, 0})
		g.expect("denied after", 0, small, fig{false, -1, 21 * s, 11 * s})
		g.expect("denied again, from the hint", 9*s, small, fig{false, 0, 19 * s, 9 * s})
		g.clock.Advance(-5 * s)
		g.peek("a peek with the clock set back", small, fig{false, 0, 19 * s, 9 * s})
	})
}
