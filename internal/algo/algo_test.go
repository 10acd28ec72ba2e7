package algo_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

func rule(t *testing.T, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule("r", limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestInterval(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		window time.Duration
		want   time.Duration
	}{
		{5, time.Second, 200 * time.Millisecond},
		{3, time.Second, 333334 * time.Microsecond}, // rounded up
		{1, time.Millisecond, time.Millisecond},
		{1000, time.Millisecond, time.Microsecond}, // never below 1µs
		{bounds.Limit, time.Millisecond, time.Microsecond},
		{10_000_000, time.Hour, 360 * time.Microsecond},
	} {
		if got := algo.Interval(rule(t, tc.limit, tc.window, floodgate.TokenBucket)); got != tc.want {
			t.Errorf("Interval(%d per %v) = %v, want %v", tc.limit, tc.window, got, tc.want)
		}
	}
}

// Life at the extremes of every bound: the longest valid token bucket
// take must not overflow (it once came out at -1m29s).
func TestLifeAtTheBounds(t *testing.T) {
	for _, tc := range []struct {
		r    floodgate.Rule
		cost int64
		want time.Duration
	}{
		{rule(t, 10, time.Minute, floodgate.SlidingWindow), 3, time.Minute},
		{rule(t, 10, time.Hour, floodgate.FixedWindow), 10, time.Hour},
		{rule(t, 10, time.Hour, floodgate.SlidingWindowCounter), 1, 2 * time.Hour},
		{rule(t, 10, time.Minute, floodgate.TokenBucket), 3, 18 * time.Second},
		{rule(t, 10_000_000, time.Hour, floodgate.TokenBucket), 10_000_000, time.Hour},
		{rule(t, bounds.Limit, time.Millisecond, floodgate.TokenBucket), bounds.Limit, bounds.Limit * time.Microsecond},
		{rule(t, 1, bounds.Window, floodgate.TokenBucket), 1, bounds.Window},
		{rule(t, 1, bounds.Window, floodgate.SlidingWindowCounter), 1, 2 * bounds.Window},
		// An Overdraw hit's cost, up to MaxLimit: the TAT runs at most
		// Ahead past a full bucket's.
		{rule(t, 10, time.Minute, floodgate.TokenBucket), bounds.Limit, time.Minute + algo.Ahead},
		{rule(t, 1, bounds.Window, floodgate.TokenBucket), bounds.Limit, bounds.Window + algo.Ahead},
		{rule(t, 1000, time.Millisecond, floodgate.TokenBucket), bounds.Limit, time.Millisecond + algo.Ahead},
	} {
		if got := algo.Life(tc.r, tc.cost); got != tc.want || got <= 0 {
			t.Errorf("Life(%v, cost %d) = %v, want %v", tc.r, tc.cost, got, tc.want)
		}
	}
}

// The bounds of what a key holds past its limit (floodgate.Hit.Overdraw)
// are never below the limit, and keep the scripts' arithmetic exact.
func TestOverdrawBounds(t *testing.T) {
	for _, r := range []floodgate.Rule{
		rule(t, 1, time.Millisecond, floodgate.SlidingWindowCounter),
		rule(t, 100, time.Minute, floodgate.SlidingWindowCounter),
		rule(t, 100_000, 24*time.Hour, floodgate.SlidingWindowCounter),
		rule(t, 27, bounds.Window, floodgate.SlidingWindowCounter),
		rule(t, 1<<53/(1<<20)-1, 1<<20*time.Microsecond, floodgate.SlidingWindowCounter), // (limit+1)*W is 2^53
	} {
		us := int64(r.Window / time.Microsecond)
		if c := algo.CounterMax(r); c < r.Limit || (c+1)*us > 1<<53 || (c+2)*us <= 1<<53 {
			t.Errorf("CounterMax(%v) = %d: want the most c with (c+1) * %dµs <= 2^53, at least the limit", r, c, us)
		}
	}
	for _, tc := range []struct {
		h    floodgate.Hit
		want int64
	}{
		{floodgate.Hit{Rule: rule(t, 10, time.Minute, floodgate.FixedWindow)}, 10},
		{floodgate.Hit{Rule: rule(t, 10, time.Minute, floodgate.FixedWindow), Overdraw: true}, bounds.Limit},
		{floodgate.Hit{Rule: rule(t, 10, time.Minute, floodgate.SlidingWindow), Overdraw: true}, bounds.SlidingCost},
		{floodgate.Hit{Rule: rule(t, 5000, time.Minute, floodgate.SlidingWindow)}, bounds.SlidingCost},
	} {
		if got := algo.MaxCost(tc.h); got != tc.want {
			t.Errorf("MaxCost(%+v) = %d, want %d", tc.h, got, tc.want)
		}
	}
}
