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
		// Ahead past a full bucket's, a full bucket's refill time again.
		{rule(t, 10, time.Minute, floodgate.TokenBucket), bounds.Limit, 2 * time.Minute},
		{rule(t, 1, bounds.Window, floodgate.TokenBucket), bounds.Limit, 2 * bounds.Window},
		{rule(t, 1000, time.Millisecond, floodgate.TokenBucket), bounds.Limit, 2 * time.Millisecond},
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
		exact := (1<<53)/us - 1 // the most c with (c+1) * us <= 2^53
		if c := algo.CounterMax(r); c < r.Limit || c != min(2*r.Limit, exact) || (exact+1)*us > 1<<53 || (exact+2)*us <= 1<<53 {
			t.Errorf("CounterMax(%v) = %d: want twice the limit, %d, or the most c with (c+1) * %dµs <= 2^53, %d, whichever is less", r, c, 2*r.Limit, us, exact)
		}
	}
	// A debt of at most the capacity: however large a hit, a token
	// bucket's key is at most one refill of its capacity ahead.
	for _, tc := range []struct {
		r          floodgate.Rule
		count, log int64
		ahead      time.Duration
	}{
		{r: rule(t, 10, time.Minute, floodgate.FixedWindow), count: 20},
		{r: rule(t, bounds.Limit, time.Minute, floodgate.FixedWindow), count: 1 << 52},
		{r: rule(t, 10, time.Minute, floodgate.SlidingWindow), log: 20},
		{r: rule(t, 5000, time.Minute, floodgate.SlidingWindow), log: 5000 + bounds.SlidingCost},
		{r: rule(t, 10, time.Minute, floodgate.TokenBucket), ahead: time.Minute},
		{r: floodgate.Rule{Name: "b", Limit: 10, Burst: 30, Window: time.Minute, Algorithm: floodgate.TokenBucket}, ahead: 3 * time.Minute},
		{r: rule(t, 1, bounds.Window, floodgate.TokenBucket), ahead: bounds.Window},
		{r: rule(t, bounds.Limit, time.Millisecond, floodgate.TokenBucket), ahead: bounds.Window}, // a refill of 2^51µs, 71 years
	} {
		switch tc.r.Algorithm {
		case floodgate.FixedWindow:
			if got := algo.MaxCount(tc.r); got != tc.count {
				t.Errorf("MaxCount(%v) = %d, want %d", tc.r, got, tc.count)
			}
		case floodgate.SlidingWindow:
			if got := algo.LogMax(tc.r); got != tc.log {
				t.Errorf("LogMax(%v) = %d, want %d", tc.r, got, tc.log)
			}
		default:
			if got := algo.Ahead(tc.r); got != tc.ahead {
				t.Errorf("Ahead(%v) = %v, want %v", tc.r, got, tc.ahead)
			}
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
		{floodgate.Hit{Rule: rule(t, 10, time.Minute, floodgate.SlidingWindow)}, 10},
		{floodgate.Hit{Rule: rule(t, 5000, time.Minute, floodgate.Concurrency)}, bounds.SlidingCost},
		{floodgate.Hit{Rule: floodgate.Rule{Name: "b", Limit: 10, Window: time.Minute, Algorithm: floodgate.TokenBucket, Burst: 40}}, 40},
		{floodgate.Hit{Rule: floodgate.Rule{Name: "b", Limit: 10, Window: time.Minute, Algorithm: floodgate.TokenBucket, Burst: 40}, Overdraw: true}, bounds.Limit},
	} {
		if got := algo.MaxCost(tc.h); got != tc.want {
			t.Errorf("MaxCost(%+v) = %d, want %d", tc.h, got, tc.want)
		}
	}
}
