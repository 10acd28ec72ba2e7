package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// takeCases check that a store names each take in its stamps
// ([floodgate.Stamp.Take]) and that Refund and Renew find a take from the
// receipt alone: one call may hold receipts of several takes of one key,
// and each credits or renews exactly its own.
var takeCases = []testCase{
	{"RefundFindsEachTakeByItsReceipt", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range append(algorithms[:len(algorithms):len(algorithms)], floodgate.Concurrency) {
			r := rule(t, "takes", 4, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			// Three takes of one key, of costs 1, 2 and 1: the key is full.
			var rs []floodgate.Receipt
			for _, cost := range []int64{1, 2, 1} {
				h := floodgate.Hit{Rule: r, Key: k, Cost: cost}
				res := takeOn(t, e, h)
				if !res.Allowed || res.Stamp.Take == 0 {
					t.Fatalf("%v: take of cost %d: got %+v; a recorded hit's stamp must name its take (Stamp.Take not zero)", alg, cost, res)
				}
				for _, prev := range rs {
					if prev.Stamp.Epoch == res.Stamp.Epoch && prev.Stamp.Take == res.Stamp.Take {
						t.Fatalf("%v: two takes of one state both named %d; a take's name must be its own", alg, res.Stamp.Take)
					}
				}
				rs = append(rs, floodgate.Receipt{Hit: h, Stamp: res.Stamp})
			}
			// One call with the receipts of two takes (costs 2 and 1): each
			// credits its own cost, once, leaving the third take's 1.
			refundOn(t, e, rs[1], rs[0])
			if got := held(t, e, l, r, k); got != 1 {
				t.Fatalf("%v: after refunding two takes of costs 2 and 1 in one call: %d units held, want 1; Refund must find each take by its receipt", alg, got)
			}
			// All three again: only the third has anything left to credit.
			refundOn(t, e, rs[0], rs[1], rs[2])
			if got := held(t, e, l, r, k); got != 0 {
				t.Fatalf("%v: after refunding all three takes (two of them again): %d units held, want 0; each receipt credits its own take, once", alg, got)
			}
		}
	}},
	{"RenewFindsEachLeaseByItsReceipt", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "renewals", 3, hour, floodgate.Concurrency)
		k := key(t)
		var rs []floodgate.Receipt
		for _, cost := range []int64{1, 2} {
			h := floodgate.Hit{Rule: r, Key: k, Cost: cost}
			res := takeOn(t, e, h)
			if !res.Allowed || res.Stamp.Take == 0 {
				t.Fatalf("lease of cost %d: got %+v; a recorded hit's stamp must name its take", cost, res)
			}
			rs = append(rs, floodgate.Receipt{Hit: h, Stamp: res.Stamp})
		}
		e.sleep(e.unit)
		// One call with the leases of two takes, the later first.
		stamps, err := e.store.Renew(context.Background(), []floodgate.Receipt{rs[1], rs[0]})
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if len(stamps) != 2 {
			t.Fatalf("Renew of 2 leases: %d stamps", len(stamps))
		}
		for i, j := range []int{1, 0} {
			got, was := stamps[i], rs[j].Stamp
			if got.Epoch != was.Epoch || got.Take != was.Take || !near(got.At.Sub(was.At), e.unit, e.tol+e.unit/2) {
				t.Fatalf("renewal of the lease of cost %d: stamp %+v, was %+v; want its own Epoch and Take, its time moved on by about %v", rs[j].Hit.Cost, got, was, e.unit)
			}
			rs[j].Stamp = got
		}
		if got := held(t, e, l, r, k); got != 3 {
			t.Fatalf("after renewing both leases: %d slots held, want 3; a renewal never changes the count", got)
		}
		refundOn(t, e, rs[1])
		if got := held(t, e, l, r, k); got != 1 {
			t.Fatalf("after releasing the renewed lease of cost 2: %d slots held, want 1", got)
		}
		refundOn(t, e, rs[0], rs[1])
		if got := held(t, e, l, r, k); got != 0 {
			t.Fatalf("after releasing both renewed leases (one again): %d slots held, want 0", got)
		}
	}},
}

// takeOn takes the single hit h on the store itself, with no Limiter in
// between, and returns its result.
func takeOn(t *testing.T, e env, h floodgate.Hit) floodgate.Result {
	t.Helper()
	res, err := e.store.Take(context.Background(), []floodgate.Hit{h})
	if err != nil || len(res) != 1 {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	return res[0]
}

// refundOn refunds receipts on the store itself, in one call.
func refundOn(t *testing.T, e env, receipts ...floodgate.Receipt) {
	t.Helper()
	if err := e.store.Refund(context.Background(), receipts); err != nil {
		t.Fatalf("Refund: %v", err)
	}
}

// held returns how many units of its limit the key k holds under r: the
// limit less what is free. A token bucket's figure is its debt in
// whole emission intervals, rounded to the nearest (a refund credits the
// take's cost less the time since the take, so a real clock leaves a few
// milliseconds of debt).
func held(t *testing.T, e env, l *floodgate.Limiter, r floodgate.Rule, k string) int64 {
	t.Helper()
	if r.Algorithm != floodgate.TokenBucket {
		return r.Limit - free(t, l, floodgate.Hit{Rule: r, Key: k})
	}
	// A peek of cost 1 reports the bucket's time to full with that hit
	// recorded: one interval more than the debt.
	d := peek(t, l, floodgate.Hit{Rule: r, Key: k, Cost: 1})
	interval := r.Window / time.Duration(r.Limit)
	return int64((d.ResetAfter+interval/2)/interval) - 1
}
