package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// escrowCases check the store primitive of escrow ([floodgate.Hit.Lease]):
// a lease is checked as if all its units were taken now and recorded as if
// all were taken at its end, and its unused units go back through Refund
// without crediting more than the lease holds.
var escrowCases = []testCase{
	{"LeaseSlidingWindowIsRecordedAtItsEnd", func(t *testing.T, e env, l *floodgate.Limiter) {
		const lease = time.Second
		r := rule(t, "escrow-log", 10, hour, floodgate.SlidingWindow)
		k := key(t)
		h := floodgate.Hit{Rule: r, Key: k, Cost: 4, Lease: lease}
		g := takeOn(t, e, h)
		if !g.Allowed || g.Remaining != 6 || !near(g.ResetAfter, hour+lease, e.tol) || g.RetryAfter != 0 || g.Lease != lease || g.Stamp.Take == 0 {
			t.Fatalf("lease of 4 of 10 for %v: got %+v; want allowed, remaining 6, reset after %v (the units weigh until the lease's end + the window), Lease %v", lease, g, hour+lease, lease)
		}
		d := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 1})
		if !d.Allowed || d.Remaining != 5 || !near(d.ResetAfter, hour+lease, e.tol) {
			t.Fatalf("direct take after the lease: got %+v; want allowed, remaining 5, reset after about %v (it is recorded at the lease's end, which keeps the log in order)", d, hour+lease)
		}
		if at := g.Stamp.At.Sub(d.Stamp.At); !near(at, lease, e.tol) {
			t.Fatalf("the lease's stamp is %v after the direct take's; want about %v: a lease is stamped at its end", at, lease)
		}
		// Give back 3 of the lease's 4 units: 1 of the lease and the
		// direct take's stay.
		back := floodgate.Receipt{Hit: floodgate.Hit{Rule: r, Key: k, Cost: 3, Lease: lease}, Stamp: g.Stamp}
		refundOn(t, e, back)
		if got := held(t, e, l, r, k); got != 2 {
			t.Fatalf("after giving back 3 unused units of a lease of 4: %d held, want 2", got)
		}
		refundOn(t, e, back)
		if got := held(t, e, l, r, k); got != 2 {
			t.Fatalf("after giving back the same 3 units again: %d held, want 2; a refund is idempotent", got)
		}
	}},
	{"LeaseSlidingWindowWeighsUntilItsEndPlusTheWindow", func(t *testing.T, e env, l *floodgate.Limiter) {
		lease := min(time.Second, 4*e.unit)
		w := 4 * e.unit
		r := rule(t, "escrow-life", 3, w, floodgate.SlidingWindow)
		k := key(t)
		if g := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 3, Lease: lease}); !g.Allowed || g.Remaining != 0 {
			t.Fatalf("lease of the whole limit: got %+v", g)
		}
		e.sleep(w + lease/2) // past a window from the grant, short of one from the end
		d := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 1})
		if want := lease / 2; d.Allowed || d.Remaining != 0 || !near(d.RetryAfter, want, e.tol) {
			t.Fatalf("a window and a unit after a lease of the limit: got %+v; want denied, retry after about %v: the lease's units weigh until its end + the window", d, want)
		}
		e.sleep(lease/2 + e.tol)
		if d := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 1}); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("after the lease's end + the window: got %+v; want allowed, remaining 2", d)
		}
	}},
	{"LeaseTokenBucketConformsAtTheGrantAndIsRecordedAtItsEnd", func(t *testing.T, e env, l *floodgate.Limiter) {
		lease := min(time.Second, 4*e.unit)
		tt := e.unit // the emission interval
		r := rule(t, "escrow-bucket", 4, 4*tt, floodgate.TokenBucket)
		k := key(t)
		g := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 2, Lease: lease})
		// TAT = now + lease + 2T: remaining floor((4T - lease - 2T) / T),
		// at least 0.
		wantRem := max(0, int64((2*tt-lease)/tt))
		if !g.Allowed || g.Remaining != wantRem || !near(g.ResetAfter, lease+2*tt, e.tol) || g.Lease != lease {
			t.Fatalf("lease of 2 of a full bucket of 4: got %+v; want allowed, remaining %d, reset after %v (the state advanced from the lease's end), Lease %v", g, wantRem, lease+2*tt, lease)
		}
		// Give back both units before the lease ends: the credit is at
		// most their 2T, never the lease's own wait, so the TAT goes back
		// to now + lease, not to now.
		refundOn(t, e, floodgate.Receipt{Hit: floodgate.Hit{Rule: r, Key: k, Cost: 2, Lease: lease}, Stamp: g.Stamp})
		// A peek of cost 1 reports TAT - now when denied, TAT + T - now
		// when allowed; an uncapped credit would leave TAT = now.
		d := peek(t, l, floodgate.Hit{Rule: r, Key: k})
		want := lease + tt
		if want > 4*tt {
			want = lease
		}
		if !near(d.ResetAfter, want, e.tol) {
			t.Fatalf("peek after giving back a lease's 2 unused units before its end: %+v, want reset after about %v; the credit must be capped at cost*T for a take stamped after now", d, want)
		}
	}},
	{"LeaseOfAWindowEndsWithTheWindow", func(t *testing.T, e env, l *floodgate.Limiter) {
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
			w := 8 * e.unit
			r := rule(t, "escrow-window", 10, w, alg)
			k := key(t)
			probe := floodgate.Hit{Rule: r, Key: k}
			align(t, e, l, probe)
			// Go to a little before the window's end: half a unit left,
			// less than the lease.
			if left := windowLeft(peek(t, l, probe), r); left > e.unit/2 {
				e.sleep(left - e.unit/2)
			}
			left := windowLeft(peek(t, l, probe), r)
			g := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 3, Lease: time.Second})
			if !g.Allowed || g.Remaining != 7 || g.Lease <= 0 || !near(g.Lease, min(time.Second, left), e.tol) {
				t.Fatalf("%v: lease of 3 for 1s with %v left in the window: got %+v; want allowed, remaining 7, Lease about %v (cut at the window's end)", alg, left, g, min(time.Second, left))
			}
			// Far from the end, the lease is whole.
			e.sleep(g.Lease + e.tol)
			g2 := takeOn(t, e, floodgate.Hit{Rule: r, Key: k, Cost: 2, Lease: e.unit})
			if !g2.Allowed || g2.Lease != e.unit {
				t.Fatalf("%v: lease of %v at a window's start: got %+v; want allowed, Lease %v", alg, e.unit, g2, e.unit)
			}
			refundOn(t, e, floodgate.Receipt{Hit: floodgate.Hit{Rule: r, Key: k, Cost: 2, Lease: e.unit}, Stamp: g2.Stamp})
			if got := free(t, l, probe); alg == floodgate.FixedWindow && got != 10 {
				t.Fatalf("%v: after giving back a lease's 2 units in its window: %d free, want 10", alg, got)
			}
		}
	}},
	{"LeaseIsATakeOfOneHit", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "escrow-bad", 10, hour, floodgate.SlidingWindow)
		c := rule(t, "escrow-bad-c", 10, hour, floodgate.Concurrency)
		k := key(t)
		for name, hits := range map[string][]floodgate.Hit{
			"two hits":    {{Rule: r, Key: k, Lease: time.Second}, {Rule: r, Key: k + "2"}},
			"too long":    {{Rule: r, Key: k, Lease: 2 * time.Second}},
			"negative":    {{Rule: r, Key: k, Lease: -time.Second}},
			"overdraw":    {{Rule: r, Key: k, Lease: time.Second, Overdraw: true}},
			"concurrency": {{Rule: c, Key: k, Lease: time.Second}},
		} {
			if _, err := e.store.Take(context.Background(), hits); !errors.Is(err, floodgate.ErrInvalidHit) {
				t.Fatalf("%s: Take of a lease: %v; want an error wrapping ErrInvalidHit", name, err)
			}
		}
		if got := free(t, l, floodgate.Hit{Rule: r, Key: k}); got != 10 {
			t.Fatalf("after refused leases: %d free, want 10; a refused take records nothing", got)
		}
	}},
}
