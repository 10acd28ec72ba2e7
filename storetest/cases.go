package storetest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/burst"
)

// hour is the window of cases that must not see time pass.
const hour = time.Hour

var cases = []testCase{
	{"LimitIsExact", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "exact", 5, hour, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			for i := range 5 {
				d := check(t, l, floodgate.Hit{Rule: r, Key: k})
				if !d.Allowed || d.Remaining != int64(4-i) || d.RetryAfter != 0 {
					t.Fatalf("%v: request %d of 5: got %+v; a Store must allow up to the limit, counting Remaining down to 0 with RetryAfter 0", alg, i+1, d)
				}
			}
			d := check(t, l, floodgate.Hit{Rule: r, Key: k})
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.Policy != "exact" || d.Limit != 5 {
				t.Fatalf("%v: request 6 of limit 5: got %+v; a Store must deny past the limit with a positive RetryAfter", alg, d)
			}
		}
	}},
	{"DeniedHitsAreNotRecorded", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "denied", 3, 4*e.unit, alg)
			k := key(t)
			align(t, e, l, floodgate.Hit{Rule: r, Key: k})
			var last floodgate.Decision
			for range 3 {
				last = check(t, l, floodgate.Hit{Rule: r, Key: k})
			}
			for range 10 {
				if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); d.Allowed {
					t.Fatalf("%v: got %+v past the limit", alg, d)
				}
			}
			e.sleep(last.ResetAfter + e.tol)
			for i := range 3 {
				if d := check(t, l, floodgate.Hit{Rule: r, Key: k}); !d.Allowed {
					t.Fatalf("%v: request %d after ResetAfter %v: got %+v; a Store must not record a denied hit, and must free the whole quota after ResetAfter", alg, i+1, last.ResetAfter, d)
				}
			}
		}
	}},
	{"SlidingWindowRetryAfterIsExact", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "slide", 2, 4*e.unit, floodgate.SlidingWindow)
		k := key(t)
		hit := floodgate.Hit{Rule: r, Key: k}
		check(t, l, hit)
		e.sleep(e.unit)
		check(t, l, hit)
		d := check(t, l, hit)
		if d.Allowed || !near(d.RetryAfter, 3*e.unit, e.tol) || !near(d.ResetAfter, 4*e.unit, e.tol) {
			t.Fatalf("got %+v; want denied with RetryAfter %v (the oldest request leaves the window) and ResetAfter %v (the newest leaves)", d, 3*e.unit, 4*e.unit)
		}
		e.sleep(d.RetryAfter + e.tol)
		if d := check(t, l, hit); !d.Allowed {
			t.Fatalf("after RetryAfter: got %+v; a Store must allow the request once RetryAfter has passed", d)
		}
		d = check(t, l, hit)
		if d.Allowed || !near(d.RetryAfter, e.unit-e.tol, e.tol) {
			t.Fatalf("got %+v; want denied with RetryAfter %v (the second request leaves the window)", d, e.unit-e.tol)
		}
	}},
	{"TokenBucketRetryAfterIsExact", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "bucket", 2, 4*e.unit, floodgate.TokenBucket) // one token every 2 units
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		check(t, l, hit)
		check(t, l, hit)
		d := check(t, l, hit)
		if d.Allowed || !near(d.RetryAfter, 2*e.unit, e.tol) || !near(d.ResetAfter, 4*e.unit, e.tol) {
			t.Fatalf("got %+v; want denied with RetryAfter %v (one token's interval) and ResetAfter %v", d, 2*e.unit, 4*e.unit)
		}
		e.sleep(d.RetryAfter + e.tol)
		if d := check(t, l, hit); !d.Allowed {
			t.Fatalf("after RetryAfter: got %+v; a token must be back after RetryAfter", d)
		}
		if d := check(t, l, hit); d.Allowed {
			t.Fatalf("got %+v; only one token refills per interval", d)
		}
	}},
	{"TokenBucketBurst", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "burst", 1, 2*e.unit, floodgate.TokenBucket)
		r.Burst = 3
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		for i := range 3 {
			if d := check(t, l, hit); !d.Allowed || d.Remaining != int64(2-i) {
				t.Fatalf("burst request %d: got %+v; a bucket of Burst 3 admits 3 at once", i+1, d)
			}
		}
		if d := check(t, l, hit); d.Allowed || !near(d.RetryAfter, 2*e.unit, e.tol) || d.Limit != 1 {
			t.Fatalf("got %+v; want denied with RetryAfter %v", d, 2*e.unit)
		}
	}},
	{"FixedWindowResetsAtTheBoundary", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "fixed", 2, 4*e.unit, floodgate.FixedWindow)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		align(t, e, l, hit)
		a := check(t, l, hit)
		check(t, l, hit)
		d := check(t, l, hit)
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 4*e.unit || !near(d.RetryAfter, a.ResetAfter, e.tol) {
			t.Fatalf("got %+v; want denied with RetryAfter until the window's end (%v)", d, a.ResetAfter)
		}
		e.sleep(d.RetryAfter + e.tol)
		for range 2 {
			if d := check(t, l, hit); !d.Allowed {
				t.Fatalf("next window: got %+v; a fixed window starts afresh", d)
			}
		}
	}},
	{"CostCountsAsManyRequests", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "cost", 5, hour, alg)
			hit := floodgate.Hit{Rule: r, Key: key(t), Cost: 3}
			align(t, e, l, hit)
			if d := check(t, l, hit); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("%v: cost 3 of 5: got %+v, want allowed with Remaining 2", alg, d)
			}
			if d := check(t, l, hit); d.Allowed || d.Remaining != 2 {
				t.Fatalf("%v: cost 3 with 2 left: got %+v, want denied with Remaining 2", alg, d)
			}
			hit.Cost = 2
			if d := check(t, l, hit); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%v: cost 2 with 2 left: got %+v, want allowed with Remaining 0", alg, d)
			}
		}
	}},
	{"MultiKeyIsAllOrNothing", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			a := floodgate.Hit{Rule: rule(t, "ip", 3, hour, alg), Key: key(t)}
			b := floodgate.Hit{Rule: rule(t, "account", 1, hour, alg), Key: key(t)}
			align(t, e, l, a) // every hour window has the same bounds
			if d := check(t, l, a, b); !d.Allowed || d.Policy != "account" || d.Remaining != 0 || len(d.Each) != 2 {
				t.Fatalf("%v: first check: got %+v; want allowed, reporting the worst hit (account, 0 remaining)", alg, d)
			}
			d := check(t, l, a, b)
			if d.Allowed || d.Policy != "account" || d.RetryAfter <= 0 || !d.Each[0].Allowed || d.Each[1].Allowed {
				t.Fatalf("%v: second check: got %+v; want denied by account while ip alone is within its limit", alg, d)
			}
			if p := peek(t, l, a); p.Remaining != 1 {
				t.Fatalf("%v: ip after a denied multi-key check: Remaining %d, want 1; a Store must record no hit of a denied check", alg, p.Remaining)
			}
		}
	}},
	{"PeekRecordsNothing", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			hit := floodgate.Hit{Rule: rule(t, "peek", 2, hour, alg), Key: key(t)}
			align(t, e, l, hit)
			for range 5 {
				if d := peek(t, l, hit); !d.Allowed || d.Remaining != 1 {
					t.Fatalf("%v: peek: got %+v, want what a take would answer (allowed, Remaining 1)", alg, d)
				}
			}
			check(t, l, hit)
			check(t, l, hit)
			if d := peek(t, l, hit); d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("%v: peek at the limit: got %+v, want denied", alg, d)
			}
		}
	}},
	{"RefundUndoesOnce", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			hit := floodgate.Hit{Rule: rule(t, "refund", 2, hour, alg), Key: key(t)}
			align(t, e, l, hit)
			first := check(t, l, hit)
			check(t, l, hit)
			denied := check(t, l, hit)
			refund(t, l, denied) // a denial recorded nothing: nothing to undo
			if d := peek(t, l, hit); d.Allowed {
				t.Fatalf("%v: refunding a denied decision freed quota: %+v", alg, d)
			}
			refund(t, l, first)
			d := check(t, l, hit)
			if !d.Allowed && alg == floodgate.TokenBucket && d.RetryAfter <= e.tol {
				// A token bucket's refund credits cost*T less the time
				// since the take was sent, not recorded: it may keep the
				// take's latency of debt.
				e.sleep(d.RetryAfter)
				d = check(t, l, hit)
			}
			if !d.Allowed {
				t.Fatalf("%v: after a refund: got %+v; Refund must undo the allowed hit", alg, d)
			}
			refund(t, l, first)
			if d := check(t, l, hit); d.Allowed {
				t.Fatalf("%v: second refund of the same decision freed quota again: %+v; Refund must be idempotent", alg, d)
			}
		}
	}},
	{"RefundOneHitOfMany", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			a := floodgate.Hit{Rule: rule(t, "ip", 2, hour, alg), Key: key(t)}
			b := floodgate.Hit{Rule: rule(t, "account", 2, hour, alg), Key: key(t)}
			align(t, e, l, a) // every hour window has the same bounds
			d := check(t, l, a, b)
			refund(t, l, d.Each[1])
			p := peek(t, l, a, b)
			acct := p.Each[1].Remaining == 1
			if alg == floodgate.TokenBucket && !acct {
				// A token bucket's refund credits cost*T less the time
				// since the take was sent, not recorded: it may keep the
				// take's latency of debt, which Remaining rounds down.
				acct = p.Each[1].ResetAfter <= b.Rule.Window/2+e.tol
			}
			if p.Each[0].Remaining != 0 || !acct {
				t.Fatalf("%v: after refunding only the account hit: %+v; want ip still counted (Remaining 0 after a take), account refunded (Remaining 1)", alg, p.Each)
			}
		}
	}},
	{"ResetForgetsTheKey", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			r := rule(t, "reset", 2, hour, alg)
			hit := floodgate.Hit{Rule: r, Key: key(t)}
			align(t, e, l, hit)
			check(t, l, hit)
			check(t, l, hit)
			reset(t, l, r, hit.Key)
			for range 2 {
				if d := check(t, l, hit); !d.Allowed {
					t.Fatalf("%v: after Reset: got %+v; Reset must forget the key", alg, d)
				}
			}
		}
	}},
	{"RefundAfterTheWindowMovedOnNeverOverAdmits", func(t *testing.T, e env, l *floodgate.Limiter) {
		// A take late in one window, refunded in the next: the refund must
		// not credit the new window with it. Limit 4, window 4 units: take
		// A (cost 2) one unit before the window ends, fill the next window
		// past its middle (where a counter weighs A as 1), refund A, and
		// count what the window admits in all.
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
			r := rule(t, "moved", 4, 4*e.unit, alg)
			hit := floodgate.Hit{Rule: r, Key: key(t)}
			if left := windowLeft(peek(t, l, hit), r); left > e.unit {
				e.sleep(left - e.unit)
			}
			a := check(t, l, floodgate.Hit{Rule: r, Key: hit.Key, Cost: 2})
			if !a.Allowed {
				t.Fatalf("%v: first take: %+v", alg, a)
			}
			e.sleep(windowLeft(a, r) + 2*e.unit + e.unit/4 + e.tol)
			admitted, last := 0, r.Window
			take := func() {
				d := check(t, l, hit)
				if left := windowLeft(d, r); left > last {
					t.Skipf("%v: the next window ended before the case did (machine too slow)", alg)
				} else {
					last = left
				}
				if d.Allowed {
					admitted++
				}
			}
			for range 5 {
				take()
			}
			refund(t, l, a)
			for range 5 {
				take()
			}
			if admitted > 4 {
				t.Fatalf("%v: %d requests admitted in one window of limit 4 after refunding a take of the window before; a refund must never let a key admit more than its limit (credit only a take that provably lies in the current window)", alg, admitted)
			}
		}
	}},
	{"TokenBucketRefundOfAPaidTakeNeverOverAdmits", func(t *testing.T, e env, l *floodgate.Limiter) {
		// Burst 2, one token every 2 units: take A, wait until the bucket
		// is full again (A's debt is paid), take B and C (the whole
		// burst), refund A. A's cost is no longer in the state: crediting
		// it would pay B's or C's debt, and admit a third request at once.
		r := rule(t, "paid", 2, 4*e.unit, floodgate.TokenBucket)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		a := check(t, l, hit)
		if !a.Allowed {
			t.Fatalf("first take: %+v", a)
		}
		e.sleep(a.ResetAfter + e.unit + e.tol)
		for _, name := range []string{"B", "C"} {
			if d := check(t, l, hit); !d.Allowed {
				t.Fatalf("take %s with a full bucket: %+v", name, d)
			}
		}
		refund(t, l, a)
		if d := check(t, l, hit); d.Allowed {
			t.Fatalf("a third request in a burst of 2 was admitted after refunding a take whose cost had already refilled: %+v; a refund must never let a key admit more than its limit (credit at most cost*T - age)", d)
		}
	}},
	{"HostileKeysAreIndependent", func(t *testing.T, e env, l *floodgate.Limiter) {
		mb := strings.Repeat("x", bounds.KeyLen-256) // room for the prefix
		long := strings.Repeat("k", 100)
		keys := []string{
			"{a}", "a}{b", "{", "}", "line\nbreak", "cr\r\nlf", "nul\x00byte", "\xff\xfe\xfd", "ünïcødé",
			mb + "a", mb + "b", long + "1", long + "2", "~", "~abc", "a:b", "a b", "fg:{x}:s", "*", "?",
		}
		r := rule(t, "hostile", 1, hour, floodgate.SlidingWindow)
		prefix := key(t)
		for _, k := range keys {
			if d := check(t, l, floodgate.Hit{Rule: r, Key: prefix + k}); !d.Allowed {
				t.Fatalf("first request of key %q: got %+v; distinct keys must not share state", truncate(k), d)
			}
		}
		for _, k := range keys {
			if d := check(t, l, floodgate.Hit{Rule: r, Key: prefix + k}); d.Allowed {
				t.Fatalf("second request of key %q: got %+v; each key must keep its own count", truncate(k), d)
			}
		}
	}},
	{"RulesDoNotShareState", func(t *testing.T, e env, l *floodgate.Limiter) {
		k := key(t)
		for _, alg := range algorithms {
			for _, name := range []string{"one", "two"} {
				if d := check(t, l, floodgate.Hit{Rule: rule(t, name, 1, hour, alg), Key: k}); !d.Allowed {
					t.Fatalf("%v: rule %s: got %+v; rules with different names must not share a key's count", alg, name, d)
				}
			}
		}
	}},
	{"ConcurrentTakesNeverExceedTheLimit", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range algorithms {
			hit := floodgate.Hit{Rule: rule(t, "race", 50, hour, alg), Key: key(t)}
			align(t, e, l, hit)
			var allowed atomic.Int64
			burst.Run(t, 200, func(int) error {
				d, err := l.Check(context.Background(), hit)
				if d.Allowed {
					allowed.Add(1)
				}
				return err
			})
			if n := allowed.Load(); n != 50 {
				t.Fatalf("%v: %d of 200 concurrent requests allowed with limit 50; a Store must be exact under concurrency", alg, n)
			}
		}
	}},
	{"ConcurrentMultiKeyNeverExceedsAnyLimit", func(t *testing.T, e env, l *floodgate.Limiter) {
		ip := rule(t, "ip", 10, hour, floodgate.SlidingWindow)
		account := rule(t, "account", 5, hour, floodgate.SlidingWindow)
		ips := []string{key(t), key(t), key(t)}
		acct := key(t)
		var mu sync.Mutex
		perIP := map[string]int{}
		perAccount := 0
		burst.Run(t, 300, func(i int) error {
			d, err := l.Check(context.Background(), floodgate.Hit{Rule: ip, Key: ips[i%3]}, floodgate.Hit{Rule: account, Key: acct})
			if d.Allowed {
				mu.Lock()
				perIP[ips[i%3]]++
				perAccount++
				mu.Unlock()
			}
			return err
		})
		if perAccount != 5 {
			t.Fatalf("account admitted %d requests, limit 5", perAccount)
		}
		for k, n := range perIP {
			if n > 10 {
				t.Fatalf("ip %s admitted %d requests, limit 10", k, n)
			}
		}
		// Only one key was ever the bottleneck, so each ip key must hold
		// exactly what was admitted through it.
		for _, k := range ips {
			if d := peek(t, l, floodgate.Hit{Rule: ip, Key: k}); d.Remaining != int64(10-perIP[k]-1) && !(perIP[k] == 10 && !d.Allowed) {
				t.Fatalf("ip %s: peek %+v after %d admitted; a denied multi-key check must record nothing", k, d, perIP[k])
			}
		}
	}},
}

// align waits, for a fixed-window or sliding-window-counter hit, until
// the current (epoch-aligned) window has at least half of its length left,
// or 10 seconds for a long window, so that a case is not cut in two by a
// window boundary.
func align(t *testing.T, e env, l *floodgate.Limiter, hit floodgate.Hit) {
	t.Helper()
	if a := hit.Rule.Algorithm; a != floodgate.FixedWindow && a != floodgate.SlidingWindowCounter {
		return
	}
	if left := windowLeft(peek(t, l, hit), hit.Rule); left < min(hit.Rule.Window/2, 10*time.Second) {
		e.sleep(left + e.tol)
	}
}

// windowLeft returns the time left in the current window of a fixed-window
// or sliding-window-counter rule r, from a decision on it: a fixed
// window's ResetAfter; a counter's, less the window when it counts the
// next window too (it does whenever the current window counts anything
// or the decision is allowed).
func windowLeft(d floodgate.Decision, r floodgate.Rule) time.Duration {
	if r.Algorithm == floodgate.SlidingWindowCounter && d.ResetAfter > r.Window {
		return d.ResetAfter - r.Window
	}
	return d.ResetAfter
}

func refund(t *testing.T, l *floodgate.Limiter, d floodgate.Decision) {
	t.Helper()
	if err := l.Refund(context.Background(), d); err != nil {
		t.Fatalf("Refund: %v", err)
	}
}

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
