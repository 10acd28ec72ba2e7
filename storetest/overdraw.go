package storetest

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Overdraw hits (floodgate.Hit.Overdraw): recorded past the limit, the
// debt that follows and its end, refunds, Reset, checks of several hits,
// and the bounds of what each algorithm holds past its limit. Limit 4
// throughout; windows of 4 units where time must pass.
var overdrawCases = []testCase{
	{"OverdrawDebtFixedWindow", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "odfixed", 4, 4*e.unit, floodgate.FixedWindow)
		k := key(t)
		align(t, e, l, floodgate.Hit{Rule: r, Key: k})
		d := charge(t, l, r, k, 6)
		left := d.ResetAfter
		if d.Allowed || !d.Recorded || d.Remaining != -2 || d.RetryAfter != left || left > r.Window {
			t.Fatalf("charge of 6 on a fixed window of 4: %+v; want recorded past the limit, Remaining -2, RetryAfter the window's end", d)
		}
		debt(t, e, l, r, k, -2, left)
		e.sleep(left + e.tol)
		if d := allowN(t, l, r, k, 1); !d.Allowed || d.Remaining != 3 {
			t.Fatalf("the next window: %+v; want allowed, Remaining 3: a fixed window forgets its debt when it ends", d)
		}
	}},
	{"OverdrawDebtTokenBucket", func(t *testing.T, e env, l *floodgate.Limiter) {
		u := e.unit
		r := rule(t, "odbucket", 4, 4*u, floodgate.TokenBucket) // a token every unit
		k := key(t)
		d := charge(t, l, r, k, 6)
		if d.Allowed || !d.Recorded || d.Remaining != -2 || !near(d.ResetAfter, 6*u, e.tol) || !near(d.RetryAfter, 3*u, e.tol) {
			t.Fatalf("charge of 6 on a bucket of 4: %+v; want recorded past the limit, Remaining -2, ResetAfter %v, RetryAfter %v (the debt of 2 and a token)", d, 6*u, 3*u)
		}
		debt(t, e, l, r, k, -2, 3*u)
		e.sleep(3*u/2 + e.tol)
		if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); d.Allowed || d.Remaining != -1 || !near(d.RetryAfter, 3*u/2-e.tol, e.tol) {
			t.Fatalf("half way: %+v; want denied, Remaining -1 (half a token still owed, rounded up), RetryAfter %v", d, 3*u/2)
		}
		e.sleep(3*u/2 + e.tol)
		if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("once the debt is worked off: %+v; want allowed: a token bucket works its debt off at its rate", d)
		}
	}},
	{"OverdrawDebtSlidingWindowCounter", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "odcounter", 4, 4*e.unit, floodgate.SlidingWindowCounter)
		k := key(t)
		align(t, e, l, floodgate.Hit{Rule: r, Key: k})
		d := charge(t, l, r, k, 6)
		// A request of cost 1 fits once the count of 6, now the previous
		// window's, weighs 3: half way through the next window.
		want := windowLeft(d, r) + r.Window/2
		if d.Allowed || !d.Recorded || d.Remaining != -2 || d.RetryAfter != want {
			t.Fatalf("charge of 6 on a counter of 4: %+v; want recorded past the limit, Remaining -2, RetryAfter %v", d, want)
		}
		debt(t, e, l, r, k, -2, want)
		e.sleep(want + e.tol)
		if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); !d.Allowed {
			t.Fatalf("after RetryAfter: %+v; want allowed", d)
		}
	}},
	{"OverdrawDebtSlidingWindow", func(t *testing.T, e env, l *floodgate.Limiter) {
		u := e.unit
		r := rule(t, "odlog", 4, 4*u, floodgate.SlidingWindow)
		k := key(t)
		allowN(t, l, r, k, 3)
		e.sleep(u)
		d := charge(t, l, r, k, 3)
		// Six times in the window: the third oldest (the first three's)
		// must leave before a request of cost 1 fits.
		if d.Allowed || !d.Recorded || d.Remaining != -2 || !near(d.ResetAfter, 4*u, e.tol) || !near(d.RetryAfter, 3*u, e.tol) {
			t.Fatalf("charge of 3 on a log of 4 holding 3: %+v; want recorded past the limit, Remaining -2, ResetAfter %v, RetryAfter %v (the first three leave)", d, 4*u, 3*u)
		}
		debt(t, e, l, r, k, -2, 3*u)
		e.sleep(d.RetryAfter + e.tol)
		if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("once the first three left: %+v; want allowed, Remaining 0 (the charge's three and this one)", d)
		}
	}},
	{"OverdrawRefundCreditsWhatItTook", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "odrefund", 4, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			one := charge(t, l, r, k, 1)
			d := charge(t, l, r, k, 6)
			if d.Allowed || !d.Recorded || d.Remaining != -3 {
				t.Fatalf("%v: charges of 1 and 6 on a limit of 4: %+v; want the second recorded past the limit, Remaining -3", alg, d)
			}
			refund(t, l, d)
			if p := peek(t, l, floodgate.Hit{Rule: r, Key: k}); !p.Allowed || p.Remaining != 2 {
				t.Fatalf("%v: after refunding the charge of 6: %+v; want allowed, Remaining 2 (the charge of 1 alone): a refund credits what the hit took", alg, p)
			}
			refund(t, l, d)
			if p := peek(t, l, floodgate.Hit{Rule: r, Key: k}); p.Remaining != 2 {
				t.Fatalf("%v: after refunding it again: %+v; want Remaining 2 still: Refund must be idempotent", alg, p)
			}
			refund(t, l, one)
			p := peek(t, l, floodgate.Hit{Rule: r, Key: k})
			if p.Remaining != 3 && !(alg == floodgate.TokenBucket && p.Remaining == 2 && p.ResetAfter <= r.Window/4+e.tol) {
				// A token bucket's refund credits cost*T less the time
				// since the take: it may keep that latency of debt, which
				// Remaining rounds down.
				t.Fatalf("%v: after refunding the charge of 1, recorded within the limit: %+v; want Remaining 3", alg, p)
			}
		}
	}},
	{"OverdrawResetClearsTheDebt", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "odreset", 4, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			d := charge(t, l, r, k, 9)
			reset(t, l, r, k)
			if n := admitted(t, l, r, k, 6); n != 4 {
				t.Fatalf("%v: after Reset, %d of 6 admitted; want the full limit of 4: Reset forgets a debt", alg, n)
			}
			refund(t, l, d)
			if n := admitted(t, l, r, k, 2); n != 0 {
				t.Fatalf("%v: a refund of a charge made before a Reset let %d more through", alg, n)
			}
		}
	}},
	{"OverdrawInACheckOfSeveralHits", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			login := floodgate.Hit{Rule: rule(t, "odlogin", 1, hour, alg), Key: key(t)}
			cost := floodgate.Hit{Rule: rule(t, "odcost", 4, hour, alg), Key: key(t), Cost: 5, Overdraw: true}
			align(t, e, l, login)
			d := check(t, l, login, cost)
			if d.Allowed || !d.Recorded || d.Policy != "odcost" || !d.Each[0].Allowed || d.Each[1].Allowed || d.Each[1].Remaining != -1 {
				t.Fatalf("%v: a hit within its limit and an overdraw hit past its own: %+v; want both recorded, the overdraw hit not allowed, Remaining -1", alg, d)
			}
			// 3 more keeps the key within its bound, a debt of 4 (a
			// Cluster's roll-back credits no hit that carried its key
			// past the bound: floodgate.Hit.Overdraw).
			more := cost
			more.Cost = 3
			d = check(t, l, login, more)
			if d.Allowed || d.Recorded || d.Each[0].Allowed {
				t.Fatalf("%v: the hit past its limit, with an overdraw hit: %+v; want nothing recorded", alg, d)
			}
			if p := peek(t, l, floodgate.Hit{Rule: cost.Rule, Key: cost.Key}); p.Remaining != -1 {
				t.Fatalf("%v: %+v; want Remaining -1: an overdraw hit is recorded only when the other hits of its check are", alg, p)
			}
			two := floodgate.Hit{Rule: cost.Rule, Key: cost.Key, Cost: 2, Overdraw: true} // a debt of 3, within the bound of 4
			only := check(t, l, two, floodgate.Hit{Rule: cost.Rule, Key: key(t), Cost: 2, Overdraw: true})
			if only.Allowed || !only.Recorded || !only.Each[1].Allowed || only.Each[0].Remaining != -3 {
				t.Fatalf("%v: a check of overdraw hits alone: %+v; want it recorded, whatever the limits", alg, only)
			}
		}
	}},
	{"OverdrawDebtAtMostTheCapacity", func(t *testing.T, e env, l *floodgate.Limiter) {
		// One charge of the highest cost (2^51, which a debt without
		// bound would make ten years of a token bucket's) leaves a debt
		// of the capacity, 4, and no more: the key admits again within
		// about a window, and the figures say so.
		u := e.unit
		for _, tc := range []struct {
			alg   floodgate.Algorithm
			cost  int64
			reset time.Duration // ResetAfter after the charge; 0: windowLeft (fixed and counter, aligned)
			retry time.Duration // RetryAfter, past windowLeft for the counter
		}{
			// The TAT runs a full bucket's refill (4 units) past a full
			// bucket's: reset in 8 units, a token of cost 1 in 5.
			{floodgate.TokenBucket, bounds.Limit, 8 * u, 5 * u},
			// The window's end forgets it.
			{floodgate.FixedWindow, bounds.Limit, 0, 0},
			// A count of 8 weighs 3 once 5/8 of the next window is gone.
			{floodgate.SlidingWindowCounter, bounds.Limit, 0, 4 * u * 5 / 8},
			// The log keeps 8 times, all leave with the window.
			{floodgate.SlidingWindow, bounds.SlidingCost, 4 * u, 4 * u},
		} {
			r := rule(t, "odcap", 4, 4*u, tc.alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			d := charge(t, l, r, k, tc.cost)
			reset, retry := tc.reset, tc.retry
			switch tc.alg {
			case floodgate.FixedWindow:
				reset, retry = d.ResetAfter, d.ResetAfter
			case floodgate.SlidingWindowCounter:
				reset, retry = windowLeft(d, r)+r.Window, windowLeft(d, r)+tc.retry
			}
			if d.Allowed || !d.Recorded || d.Remaining != -4 || !near(d.ResetAfter, reset, e.tol) || !near(d.RetryAfter, retry, e.tol) || d.ResetAfter > 2*r.Window {
				t.Fatalf("%v: a charge of %d on a limit of 4 per %v: %+v; want recorded, Remaining -4, ResetAfter %v, RetryAfter %v: a key owes at most its capacity", tc.alg, tc.cost, r.Window, d, reset, retry)
			}
			debt(t, e, l, r, k, -4, retry)
			e.sleep(retry + e.tol)
			if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); !d.Allowed {
				t.Fatalf("%v: %v after the charge: %+v; want allowed: the debt is worked off", tc.alg, retry+e.tol, d)
			}
		}
	}},
	{"OverdrawPastTheBoundStartsAnew", func(t *testing.T, e env, l *floodgate.Limiter) {
		// Each algorithm's bound (floodgate.Hit.Overdraw), reached: the
		// state holds up to it, and no refund of a charge made before
		// or at it credits anything.
		for _, tc := range []struct {
			alg     floodgate.Algorithm
			charges []int64
			want    int64 // Remaining once at the bound
		}{
			// 6 and 2 carry the key to its bound, a debt of its capacity
			// (4), and not past it; the third charge would.
			{floodgate.FixedWindow, []int64{6, 2, bounds.Limit}, -4},
			{floodgate.SlidingWindowCounter, []int64{6, 2, bounds.Limit}, -4},
			{floodgate.TokenBucket, []int64{6, 2, bounds.Limit}, -4},
			{floodgate.SlidingWindow, []int64{6, 2, bounds.SlidingCost}, -4},
		} {
			r := rule(t, "odbound", 4, hour, tc.alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			var ds []floodgate.Decision
			for _, n := range tc.charges {
				ds = append(ds, charge(t, l, r, k, n))
			}
			if last := ds[len(ds)-1]; !last.Recorded || last.Remaining != tc.want {
				t.Fatalf("%v: charges %v on a limit of 4: %+v; want recorded, Remaining %d: what the state holds past its limit", tc.alg, tc.charges, last, tc.want)
			}
			for _, d := range ds {
				refund(t, l, d)
			}
			if p := peek(t, l, floodgate.Hit{Rule: r, Key: k}); p.Remaining != tc.want {
				t.Fatalf("%v: after refunding every charge: %+v; want Remaining %d still: a state carried past its bound starts anew, and no refund of a charge before it credits anything", tc.alg, p, tc.want)
			}
			reset(t, l, r, k) // a debt of an hour would outlive the test
		}
	}},
}

// charge is a Check of one Overdraw hit of cost n.
func charge(t *testing.T, l *floodgate.Limiter, r floodgate.Rule, k string, n int64) floodgate.Decision {
	t.Helper()
	return check(t, l, floodgate.Hit{Rule: r, Key: k, Cost: n, Overdraw: true})
}

// debt checks that a key in debt denies a request of cost 1, with
// Remaining remaining (negative: minus the debt) and RetryAfter retry,
// and that Peek says the same.
func debt(t *testing.T, e env, l *floodgate.Limiter, r floodgate.Rule, k string, remaining int64, retry time.Duration) {
	t.Helper()
	hit := floodgate.Hit{Rule: r, Key: k}
	for _, d := range []floodgate.Decision{check(t, l, hit), peek(t, l, hit)} {
		if d.Allowed || d.Recorded || d.Remaining != remaining || !near(d.RetryAfter, retry, e.tol) {
			t.Fatalf("%v in debt: %+v; want denied, Remaining %d (minus the debt), RetryAfter %v: a key in debt is denied until the debt is worked off", r.Algorithm, d, remaining, retry)
		}
	}
}
