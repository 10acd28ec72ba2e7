package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Sequences that once broke a store's promises: a refund after a Reset,
// a refund repeated across a Reset, a caller reusing its slice of hits, a
// cached denial outliving one hit's wait, and rules that share a name but
// not a window or an algorithm (a rolling deploy that changes a limit).
var sequences = []testCase{
	{"ConcurrentRefundsOfEachAndTheWholeCreditOnce", func(t *testing.T, e env, l *floodgate.Limiter) {
		// A handler that refunds the whole decision while others refund
		// its hits one by one, all at once: each key is credited its one
		// take, once.
		for _, alg := range algorithms {
			a := floodgate.Hit{Rule: rule(t, "cra", 2, hour, alg), Key: key(t)}
			b := floodgate.Hit{Rule: rule(t, "crb", 2, hour, alg), Key: key(t)}
			align(t, e, l, a)
			check(t, l, a, b)
			d := check(t, l, a, b)
			if !d.Allowed || len(d.Each) != 2 {
				t.Fatalf("%v: second of a limit of 2: %+v; want allowed", alg, d)
			}
			var wg sync.WaitGroup
			for i := range 24 {
				target := d
				if i%3 > 0 {
					target = d.Each[i%3-1]
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := l.Refund(context.Background(), target); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if d := check(t, l, a, b); !d.Allowed {
				t.Fatalf("%v: after 24 concurrent refunds of one decision and of its hits: %+v; want one take of each key credited", alg, d)
			}
			if d := check(t, l, a, b); d.Allowed {
				t.Fatalf("%v: after 24 concurrent refunds of one decision and of its hits, two more takes allowed (%+v); Refund must credit each hit once, whether refunded whole or by its Each", alg, d)
			}
		}
	}},
	{"RefundAcrossResetCreditsNothing", func(t *testing.T, e env, l *floodgate.Limiter) {
		// A request in flight (cost 2), support unlocks the account, the
		// account uses its fresh quota, then the old request refunds, for
		// the first time or again: the state the take was recorded in is
		// gone, so nothing is credited, whatever happens to the key.
		for _, alg := range algorithms {
			for _, before := range []bool{false, true} {
				r := rule(t, "rr", 3, hour, alg)
				k := key(t)
				align(t, e, l, floodgate.Hit{Rule: r, Key: k})
				d0 := allowN(t, l, r, k, 2)
				if before {
					refund(t, l, d0)
				}
				reset(t, l, r, k)
				if n := admitted(t, l, r, k, 6); n != 3 {
					t.Fatalf("%v: after Reset, %d of 6 admitted; want the full limit of 3", alg, n)
				}
				refund(t, l, d0)
				if n := admitted(t, l, r, k, 3); n != 0 {
					t.Fatalf("%v: a refund (refunded before the Reset too: %v) of a take made before a Reset let %d more through a full window of limit 3; a Reset must make every earlier take unrefundable", alg, before, n)
				}
			}
		}
	}},
	{"RefundIsIdempotentAfterItEmptiedTheKey", func(t *testing.T, e env, l *floodgate.Limiter) {
		// A refund that leaves nothing deletes the key's state (a store
		// may: it is as if never seen); new takes make it anew, and a
		// second refund of the first decision must still credit nothing.
		for _, alg := range algorithms {
			r := rule(t, "emptied", 3, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			d0 := allowN(t, l, r, k, 2)
			refund(t, l, d0)
			if n := admitted(t, l, r, k, 6); n != 3 && !(alg == floodgate.TokenBucket && n == 2) {
				// A token bucket's refund keeps the take's age of debt,
				// which may cost one of the three.
				t.Fatalf("%v: after a refund of the only take, %d of 6 admitted; want 3", alg, n)
			}
			refund(t, l, d0)
			if n := admitted(t, l, r, k, 3); n != 0 {
				t.Fatalf("%v: a second refund of one decision, after its first emptied the key, let %d more through a full window of limit 3", alg, n)
			}
		}
	}},
	{"DecisionOwnsItsHits", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			acct := rule(t, "acct", 1, hour, alg)
			ip := rule(t, "ip", 5, hour, alg)
			alice, mallory, addr := key(t), key(t), key(t)
			align(t, e, l, floodgate.Hit{Rule: acct, Key: alice})
			hits := []floodgate.Hit{{Rule: acct, Key: alice}, {Rule: ip, Key: addr}}
			d := check(t, l, hits...)
			if !d.Allowed {
				t.Fatalf("%v: first check: %+v", alg, d)
			}
			hits[0].Key = mallory // the caller reuses its slice
			if got := allowN(t, l, acct, mallory, 1); !got.Allowed {
				t.Fatalf("%v: mallory's first request: %+v", alg, got)
			}
			refund(t, l, d)
			if n := admitted(t, l, acct, mallory, 2); n != 0 {
				t.Fatalf("%v: the refund credited mallory (%d admitted past her limit of 1) after the caller rewrote its slice; a Decision must keep its own copy of the hits", alg, n)
			}
			if alg != floodgate.TokenBucket { // a token bucket's refund keeps the take's age of debt
				if n := admitted(t, l, acct, alice, 2); n != 1 {
					t.Fatalf("%v: alice admitted %d of 2 after the refund; want 1: the refund must credit the hit the decision was made for", alg, n)
				}
			}
		}
	}},
	{"CachedDenialReportsOnlyLiveWaits", func(t *testing.T, e env, l *floodgate.Limiter) {
		// fast (1 per 200ms) and slow (1 per hour), denied once, checked
		// again 300ms later: fast's own wait has run out, so no answer may
		// report it denied, cached or not. The cache follows the real
		// clock, so the wait is slept on both clocks.
		cached, err := floodgate.New(e.store, floodgate.Options{Timeout: 10 * time.Second, DenialCacheSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		fast := rule(t, "fast", 1, 200*time.Millisecond, floodgate.SlidingWindow)
		slow := rule(t, "slow", 1, hour, floodgate.SlidingWindow)
		k := key(t)
		hits := []floodgate.Hit{{Rule: fast, Key: k}, {Rule: slow, Key: k}}
		if d := check(t, cached, hits...); !d.Allowed {
			t.Fatalf("first check: %+v", d)
		}
		d := check(t, cached, hits...)
		if d.Allowed || d.Each[0].Allowed || d.Each[1].Allowed {
			t.Fatalf("second check: %+v; want both hits denied", d)
		}
		wait := 300 * time.Millisecond
		e.sleep(wait)
		if e.tol == 0 { // a fake clock: let the real one pass too
			time.Sleep(wait)
		}
		for _, lim := range []*floodgate.Limiter{cached, l} {
			d := check(t, lim, hits...)
			if d.Allowed || !d.Each[0].Allowed || d.Each[0].RetryAfter != 0 || d.Each[0].Remaining != 1 ||
				d.Each[1].Allowed || d.Each[1].RetryAfter <= 0 || d.Policy != "slow" {
				t.Fatalf("after fast's wait: %+v; want denied by slow alone, fast within its limit (Remaining 1: the denied check recorded nothing; RetryAfter 0)", d)
			}
		}
	}},
	{"RuleIdentityIsNameAlgorithmAndWindow", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			hourly := rule(t, "deploy", 3, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: hourly, Key: k})
			if n := admitted(t, l, hourly, k, 4); n != 3 {
				t.Fatalf("%v: %d of 4 admitted; want 3", alg, n)
			}
			// Another window: a state of its own, fresh, and it neither
			// overwrites nor trims the hourly one.
			longer := rule(t, "deploy", 3, 2*hour, alg)
			if n := admitted(t, l, longer, k, 4); n != 3 {
				t.Fatalf("%v: the same name with a 2h window admitted %d of 4; want 3 on a fresh state", alg, n)
			}
			shorter := rule(t, "deploy", 3, 2*e.unit, alg)
			align(t, e, l, floodgate.Hit{Rule: shorter, Key: k})
			if n := admitted(t, l, shorter, k, 4); n != 3 {
				t.Fatalf("%v: the same name with a short window admitted %d of 4; want 3 on a fresh state", alg, n)
			}
			e.sleep(4*e.unit + e.tol)
			if n := admitted(t, l, shorter, k, 1); n != 1 {
				t.Fatalf("%v: the short window admitted %d after it passed; want 1", alg, n)
			}
			if n := admitted(t, l, hourly, k, 1); n != 0 {
				t.Fatalf("%v: the hourly rule admitted %d after rules of other windows ran on its key; want 0 (its state is its own)", alg, n)
			}
			// Another algorithm: a state of its own too.
			other := rule(t, "deploy", 3, hour, algorithms[(int(alg)+1)%len(algorithms)])
			if n := admitted(t, l, other, k, 1); n != 1 {
				t.Fatalf("%v: the same name and window under %v admitted %d; want 1 on a fresh state", alg, other.Algorithm, n)
			}
			// Reset and Peek follow the identity.
			reset(t, l, longer, k)
			if d := peek(t, l, floodgate.Hit{Rule: hourly, Key: k}); d.Allowed {
				t.Fatalf("%v: a Reset of the 2h rule reset the hourly one: %+v", alg, d)
			}
			if d := peek(t, l, floodgate.Hit{Rule: longer, Key: k}); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("%v: peek of the 2h rule after its Reset: %+v; want allowed, Remaining 2", alg, d)
			}
			// A changed limit keeps the state and applies at once.
			lower := rule(t, "deploy", 2, hour, alg)
			if n := admitted(t, l, lower, k, 1); n != 0 {
				t.Fatalf("%v: the limit lowered to 2 admitted %d on a key that made 3; want 0", alg, n)
			}
			if alg != floodgate.TokenBucket { // a bucket's state is time, not a count
				higher := rule(t, "deploy", 5, hour, alg)
				if n := admitted(t, l, higher, k, 3); n != 2 {
					t.Fatalf("%v: the limit raised to 5 admitted %d of 3 on a key that made 3; want 2", alg, n)
				}
			}
		}
	}},
	{"BoundsAtTheirExtremes", func(t *testing.T, e env, l *floodgate.Limiter) {
		// Every algorithm at the edges of what a Rule accepts: the
		// shortest and longest windows, the highest limits, a cost of the
		// whole capacity. A store must take it, deny the next request with
		// a positive wait no longer than the rule's period, and overflow
		// nowhere.
		counterMax := int64(1<<53)/int64(bounds.Window/time.Microsecond) - 2
		for _, tc := range []struct {
			alg    floodgate.Algorithm
			limit  int64
			window time.Duration
			cost   int64
		}{
			{floodgate.SlidingWindow, 1, time.Millisecond, 1},
			{floodgate.SlidingWindow, bounds.SlidingCost, bounds.Window, bounds.SlidingCost},
			{floodgate.TokenBucket, 1, time.Millisecond, 1},
			{floodgate.TokenBucket, bounds.Limit, time.Millisecond, bounds.Limit},
			{floodgate.TokenBucket, bounds.Limit, bounds.Window, bounds.Limit},
			{floodgate.TokenBucket, 1, bounds.Window, 1},
			{floodgate.FixedWindow, bounds.Limit, bounds.Window, bounds.Limit},
			{floodgate.FixedWindow, 1, time.Millisecond, 1},
			{floodgate.SlidingWindowCounter, counterMax, bounds.Window, counterMax},
			{floodgate.SlidingWindowCounter, 1, time.Millisecond, 1},
		} {
			r := rule(t, "edge", tc.limit, tc.window, tc.alg)
			k := key(t)
			first := allowN(t, l, r, k, tc.cost)
			if !first.Allowed || first.Remaining != tc.limit-tc.cost || first.ResetAfter <= 0 {
				t.Fatalf("%v: cost %d of limit %d per %v: %+v; want allowed with Remaining %d", tc.alg, tc.cost, tc.limit, tc.window, first, tc.limit-tc.cost)
			}
			// A token bucket whose interval is a microsecond refills a token
			// every microsecond that passes between the calls, so only the
			// buckets that refill slowly must deny the next request.
			if tc.alg == floodgate.TokenBucket && tc.limit > 1 {
				continue
			}
			next := allowN(t, l, r, k, 1)
			if tc.window > time.Second && (next.Allowed || next.RetryAfter <= 0 || next.RetryAfter > 2*tc.window) {
				t.Fatalf("%v: the request after the whole capacity of %d per %v: %+v; want denied, with a wait within the period", tc.alg, tc.limit, tc.window, next)
			}
		}
	}},
}

// allowN is a Check of one hit of cost n.
func allowN(t *testing.T, l *floodgate.Limiter, r floodgate.Rule, k string, n int64) floodgate.Decision {
	t.Helper()
	return check(t, l, floodgate.Hit{Rule: r, Key: k, Cost: n})
}

func reset(t *testing.T, l *floodgate.Limiter, r floodgate.Rule, k string) {
	t.Helper()
	if err := l.Reset(context.Background(), r, k); err != nil {
		t.Fatalf("Reset: %v", err)
	}
}

// admitted makes n requests of cost 1 and returns how many were allowed.
func admitted(t *testing.T, l *floodgate.Limiter, r floodgate.Rule, k string, n int) int {
	t.Helper()
	got := 0
	for range n {
		if allowN(t, l, r, k, 1).Allowed {
			got++
		}
	}
	return got
}
