package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// leaseCases check limits on requests in flight (floodgate.Concurrency):
// a lease holds its slot until it is released (Refund) or its time to
// live (the rule's Window) runs out, and Renew moves it on without ever
// counting it twice or letting it go.
var leaseCases = []testCase{
	{"LeaseHoldsItsSlotUntilReleased", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "held", 2, hour, floodgate.Concurrency)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		a := check(t, l, hit)
		b := check(t, l, hit)
		if !a.Allowed || a.Remaining != 1 || !b.Allowed || b.Remaining != 0 {
			t.Fatalf("two leases of 2: got %+v and %+v; a Store must admit Limit holders, counting Remaining down", a, b)
		}
		e.sleep(e.unit)
		d := check(t, l, hit)
		if d.Allowed || d.Remaining != 0 || !near(d.RetryAfter, hour-e.unit, e.tol) || d.Limit != 2 {
			t.Fatalf("a third holder: got %+v; want denied with Remaining 0 and RetryAfter %v (when the oldest lease's time to live runs out)", d, hour-e.unit)
		}
		refund(t, l, a)
		if d := check(t, l, hit); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after a release: got %+v; a released lease must free its slot at once", d)
		}
		refund(t, l, a) // a second release frees nothing
		if d := check(t, l, hit); d.Allowed {
			t.Fatalf("after a second release of one lease: got %+v; a lease must be released once, however often Refund is called", d)
		}
	}},
	{"LeaseExpiresAfterItsTimeToLive", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "ttl", 1, 4*e.unit, floodgate.Concurrency)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		dead := check(t, l, hit) // a holder that dies without releasing
		e.sleep(2 * e.unit)
		if d := check(t, l, hit); d.Allowed || !near(d.RetryAfter, 2*e.unit, e.tol) {
			t.Fatalf("within the time to live: got %+v; want denied with RetryAfter %v", d, 2*e.unit)
		}
		e.sleep(2*e.unit + e.tol)
		next := check(t, l, hit)
		if !next.Allowed {
			t.Fatalf("after the time to live: got %+v; a lease never released must free its slot once its time to live runs out", next)
		}
		if got, err := l.Renew(context.Background(), dead); err != nil || got.Allowed {
			t.Fatalf("Renew of an expired lease: got %+v, %v; a renewal must fail once the lease's time to live ran out (its slot is another's)", got, err)
		}
		refund(t, l, dead) // a late release of the dead holder's lease
		if d := check(t, l, hit); d.Allowed {
			t.Fatalf("after a renewal and a release of an expired lease: got %+v; neither may free or take the new holder's slot", d)
		}
	}},
	{"RenewMovesTheLeaseOn", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "renew", 1, 4*e.unit, floodgate.Concurrency)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		a := check(t, l, hit)
		e.sleep(3 * e.unit)
		renewed, err := l.Renew(context.Background(), a)
		if err != nil || !renewed.Allowed || !renewed.Recorded {
			t.Fatalf("Renew within the time to live: got %+v, %v; want the lease renewed", renewed, err)
		}
		e.sleep(2 * e.unit) // past the first time to live, within the renewed one
		d := check(t, l, hit)
		if d.Allowed || !near(d.RetryAfter, 2*e.unit, e.tol) || d.Remaining != 0 {
			t.Fatalf("after the first time to live: got %+v; want denied with RetryAfter %v: a renewed lease holds its slot for a time to live from its renewal", d, 2*e.unit)
		}
		refund(t, l, renewed)
		if d := check(t, l, hit); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after releasing the renewed lease: got %+v; it must free its slot", d)
		}
	}},
	{"RenewNeverTakesBackASlot", func(t *testing.T, e env, l *floodgate.Limiter) {
		r := rule(t, "noretake", 2, hour, floodgate.Concurrency)
		k := key(t)
		hit := floodgate.Hit{Rule: r, Key: k}
		check(t, l, hit) // a holder that keeps the key's state alive
		a := check(t, l, hit)
		refund(t, l, a)
		b := check(t, l, hit)
		if !b.Allowed {
			t.Fatalf("after a release: got %+v", b)
		}
		if got, err := l.Renew(context.Background(), a); err != nil || got.Allowed {
			t.Fatalf("Renew of a released lease: got %+v, %v; a released lease must not be renewed", got, err)
		}
		if n := free(t, l, hit); n != 0 {
			t.Fatalf("after a failed renewal: %d slots free; want 0: it must not change the count", n)
		}
		reset(t, l, r, k)
		if got, err := l.Renew(context.Background(), b); err != nil || got.Allowed {
			t.Fatalf("Renew after Reset: got %+v, %v; a reset ends every lease", got, err)
		}
		if n := free(t, l, hit); n != 2 {
			t.Fatalf("after a renewal of a lease that Reset ended: %d slots free; want 2: it must take nothing", n)
		}
	}},
	{"RenewWithAStaleStampStaysExact", func(t *testing.T, e env, l *floodgate.Limiter) {
		// A renewal whose answer was lost leaves its holder with the older
		// stamp; renewing and releasing with it must not let the key admit
		// more than its holders, and both releases must free both slots.
		r := rule(t, "stale", 2, hour, floodgate.Concurrency)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		a := check(t, l, hit)
		e.sleep(e.unit)
		b := check(t, l, hit)
		e.sleep(e.unit)
		if got, err := l.Renew(context.Background(), a); err != nil || !got.Allowed {
			t.Fatalf("Renew: %+v, %v", got, err) // its answer is dropped: a keeps the older stamp
		}
		e.sleep(e.unit)
		if got, err := l.Renew(context.Background(), a); err != nil || !got.Allowed {
			t.Fatalf("Renew with the older stamp: got %+v, %v; the lease still holds its slot", got, err)
		}
		if d := check(t, l, hit); d.Allowed {
			t.Fatalf("two holders of 2: got %+v; a renewal must never free a slot", d)
		}
		refund(t, l, a)
		if n := free(t, l, hit); n != 1 {
			t.Fatalf("after releasing one of two: %d slots free; want 1", n)
		}
		refund(t, l, b)
		if n := free(t, l, hit); n != 2 {
			t.Fatalf("after releasing both: %d slots free; want 2", n)
		}
	}},
	{"LeasesAreAllOrNothingWithRates", func(t *testing.T, e env, l *floodgate.Limiter) {
		rate := rule(t, "rate", 10, hour, floodgate.SlidingWindow)
		conc := rule(t, "inflight", 1, hour, floodgate.Concurrency)
		k := key(t)
		hits := []floodgate.Hit{{Rule: rate, Key: k}, {Rule: conc, Key: k}}
		first := check(t, l, hits...)
		if !first.Allowed || first.Each[0].Remaining != 9 || first.Each[1].Remaining != 0 {
			t.Fatalf("first: got %+v", first)
		}
		second := check(t, l, hits...)
		if second.Allowed || second.Policy != "inflight" {
			t.Fatalf("a second request in flight: got %+v; want denied by the concurrency limit", second)
		}
		if n := free(t, l, hits[0]); n != 9 {
			t.Fatalf("the rate after a denial by the concurrency limit: %d left; want 9: a request denied by either records neither", n)
		}
		refund(t, l, first.Each[1]) // release the lease, keep the rate's hit
		third := check(t, l, hits...)
		if !third.Allowed || third.Each[0].Remaining != 8 || third.Each[1].Remaining != 0 {
			t.Fatalf("after the release: got %+v; want allowed, the rate at 8", third)
		}
		renewed, err := l.Renew(context.Background(), third)
		if err != nil || !renewed.Allowed || len(renewed.Each) != 2 {
			t.Fatalf("Renew of a check with a lease: got %+v, %v", renewed, err)
		}
		if n := free(t, l, hits[0]); n != 8 {
			t.Fatalf("the rate after a renewal: %d left; want 8: Renew renews leases only", n)
		}
	}},
	{"LeasesOfSeveralKeysRenewTogether", func(t *testing.T, e env, l *floodgate.Limiter) {
		// Per user and per route: on a Cluster, two slots.
		user := rule(t, "user", 1, 4*e.unit, floodgate.Concurrency)
		route := rule(t, "route", 2, 4*e.unit, floodgate.Concurrency)
		hits := []floodgate.Hit{{Rule: user, Key: key(t)}, {Rule: route, Key: key(t)}}
		d := check(t, l, hits...)
		e.sleep(3 * e.unit)
		d, err := l.Renew(context.Background(), d)
		if err != nil || !d.Allowed || !d.Each[0].Allowed || !d.Each[1].Allowed {
			t.Fatalf("Renew: got %+v, %v", d, err)
		}
		e.sleep(2 * e.unit)
		if u, r := free(t, l, hits[0]), free(t, l, hits[1]); u != 0 || r != 1 {
			t.Fatalf("past the first time to live: %d and %d slots free; want 0 and 1: both leases must hold, renewed", u, r)
		}
		refund(t, l, d.Each[0])
		if u, r := free(t, l, hits[0]), free(t, l, hits[1]); u != 1 || r != 1 {
			t.Fatalf("after releasing one lease of the check: %d and %d slots free; want 1 and 1: only its slot frees", u, r)
		}
	}},
	{"LeasesNeverExceedTheLimit", func(t *testing.T, e env, l *floodgate.Limiter) {
		// Holders count themselves: after acquiring, before releasing. With
		// renewals racing acquisitions and releases, the holders at once
		// never exceed the limit, and at the end every slot is free.
		const limit, workers, rounds = 3, 16, 20
		r := rule(t, "exact", limit, hour, floodgate.Concurrency)
		hit := floodgate.Hit{Rule: r, Key: key(t)}
		var held, most, admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range rounds {
					d, err := l.Check(context.Background(), hit)
					if err != nil {
						errs <- err
						return
					}
					if !d.Allowed {
						continue
					}
					admitted.Add(1)
					n := held.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					for range 2 {
						if d, err = l.Renew(context.Background(), d); err != nil || !d.Allowed {
							errs <- err
							return
						}
					}
					held.Add(-1)
					if err := l.Refund(context.Background(), d); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("a holder failed (nil: a renewal within the time to live failed): %v", err)
		}
		if most.Load() > limit || most.Load() < 1 || admitted.Load() < limit {
			t.Fatalf("most holders at once: %d, admitted %d; a Store must never admit more than Limit holders", most.Load(), admitted.Load())
		}
		if n := free(t, l, hit); n != limit {
			t.Fatalf("after every release: %d slots free; want %d", n, limit)
		}
	}},
}

// free returns how many requests of cost 1 the key of hit could make now
// under its rule: a peek's Remaining, which counts the peeked hit when
// allowed.
func free(t *testing.T, l *floodgate.Limiter, hit floodgate.Hit) int64 {
	t.Helper()
	hit.Cost = 1
	d := peek(t, l, hit)
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}
