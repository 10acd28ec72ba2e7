package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// Escrow across replicas: several Limiters, each on a store of its own
// (its own connections), share one Redis, as replicas do.

// escrowReplicas returns n Limiters with escrow of period δ, each on its own
// store on addr under one prefix, closed when t ends.
func escrowReplicas(t *testing.T, addr string, n int, period time.Duration) []*floodgate.Limiter {
	t.Helper()
	prefix := randomPrefix()
	var out []*floodgate.Limiter
	for range n {
		s, err := New(ctx(t), Options{URL: "redis://" + addr, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		// A budget of seconds: on a loaded machine a script call may
		// take longer than the default's, which would fail a test that
		// is about what is admitted, not how fast.
		l, err := floodgate.New(s, floodgate.Options{Escrow: floodgate.Escrow{Period: period}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); s.Close() })
		out = append(out, l)
	}
	return out
}

// directOn returns a Limiter without escrow on a store of its own on
// addr with prefix.
func directOn(t *testing.T, addr, prefix string) *floodgate.Limiter {
	t.Helper()
	s, err := New(ctx(t), Options{URL: "redis://" + addr, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admission is one allowed decision: the call's start and end, between
// which it was decided.
type admission struct{ from, to time.Time }

// overAdmitted returns a description of the first set of admissions that
// proves the rule r over its limit, or "". Each admission happened at an
// instant within its [from, to]; only sets whose intervals all fit within
// one span the rule bounds count:
//   - SlidingWindow: more than Limit whose intervals fit in a span
//     shorter than Window;
//   - FixedWindow, SlidingWindowCounter: more than Limit within one
//     epoch-aligned window;
//   - TokenBucket: more than Burst + span/T + 1 in a span.
func overAdmitted(r floodgate.Rule, as []admission) string {
	slices.SortFunc(as, func(a, b admission) int { return a.from.Compare(b.from) })
	t := r.Window / time.Duration(r.Limit)
	for i, a := range as {
		n := 0
		var last time.Time
		for _, b := range as[i:] {
			switch r.Algorithm {
			case floodgate.SlidingWindow:
				if b.to.Sub(a.from) >= r.Window {
					continue
				}
			case floodgate.FixedWindow, floodgate.SlidingWindowCounter:
				w := a.from.UnixNano() / int64(r.Window)
				if b.to.UnixNano()/int64(r.Window) != w || b.from.UnixNano()/int64(r.Window) != w {
					continue
				}
			case floodgate.TokenBucket:
				if b.to.Before(last) {
					continue
				}
			}
			n++
			last = b.to
			if r.Algorithm == floodgate.TokenBucket {
				if bound := r.Capacity() + int64(b.to.Sub(a.from)/t) + 1; int64(n) > bound {
					return "token bucket: " + itoa(n) + " admissions within " + b.to.Sub(a.from).String()
				}
			}
		}
		if r.Algorithm != floodgate.TokenBucket && int64(n) > r.Limit {
			return itoa(n) + " admissions in one window from " + a.from.Format(time.StampMicro)
		}
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestEscrowReplicasNeverAdmitMoreThanTheLimit hits one key from three
// replicas with escrow and checks every window of the admissions, at two
// paces: far past the limit, with leases in use across their periods (so
// that a lease recorded at its grant, not its end, would show); and a
// little past it, so that the quota lasts to a window's end and leases
// are live across it (so that a window's lease not cut at its end would
// show).
func TestEscrowReplicasNeverAdmitMoreThanTheLimit(t *testing.T) {
	paces := []struct {
		name       string
		limit      int64
		goroutines int
		pause      time.Duration // up to, at random, between a goroutine's hits
	}{
		{"saturated", 40, 6, 4 * time.Millisecond},
		{"near", 400, 4, 24 * time.Millisecond},
	}
	for _, alg := range algorithms {
		for _, pace := range paces {
			t.Run(alg.String()+"/"+pace.name, func(t *testing.T) {
				t.Parallel()
				r := mustRule(t, "escrow-hammer", pace.limit, 500*time.Millisecond, alg)
				ls := escrowReplicas(t, redistest.Addr(t), 3, 100*time.Millisecond)
				var mu sync.Mutex
				var as []admission
				var remainingBad int
				stop := time.Now().Add(1800 * time.Millisecond)
				var wg sync.WaitGroup
				for _, l := range ls {
					for range pace.goroutines {
						wg.Go(func() {
							for time.Now().Before(stop) {
								from := time.Now()
								d, err := l.Allow(context.Background(), r, "hot")
								to := time.Now()
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									mu.Lock()
									as = append(as, admission{from, to})
									if d.Remaining < 0 || d.Remaining >= r.Limit {
										remainingBad++
									}
									mu.Unlock()
								}
								time.Sleep(time.Duration(rand.Int64N(int64(pace.pause))))
							}
						})
					}
				}
				wg.Wait()
				if remainingBad > 0 {
					t.Errorf("%d allowed decisions reported Remaining outside 0 to Limit-1", remainingBad)
				}
				if msg := overAdmitted(r, as); msg != "" {
					t.Fatalf("%v: %s (%d admissions in all); replicas with escrow must never admit more than the limit", alg, msg, len(as))
				}
				if len(as) < int(r.Limit) {
					t.Fatalf("%v: %d admissions in 1.8 s of a limit of %d per %v; escrow must not starve the key", alg, len(as), r.Limit, r.Window)
				}
			})
		}
	}
}

// TestEscrowFiguresAndClose: one replica, sequential hits: every
// decision's Remaining is exactly the limit less the hits so far (a
// lease's figures are the store's at the grant less what the lease
// used), refunds go back to the lease, once, and after Close the store
// holds exactly the hits admitted and not refunded, as if each had been
// a direct take.
func TestEscrowFiguresAndClose(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r := mustRule(t, "escrow-figures", 1000, time.Hour, alg)
			prefix := randomPrefix()
			s, err := New(ctx(t), Options{URL: "redis://" + redistest.Addr(t), Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cs := &countingStore{Store: s}
			l, err := floodgate.New(cs, floodgate.Options{Escrow: floodgate.Escrow{Period: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			calls := func() int64 { return cs.takes.Load() }
			before := calls()
			var ds []floodgate.Decision
			for i := range 200 {
				d, err := l.Allow(ctx(t), r, "k")
				if err != nil {
					t.Fatal(err)
				}
				if want := r.Limit - int64(i) - 1; !d.Allowed || d.Remaining != want || d.Limit != r.Limit || d.Policy != r.Name {
					t.Fatalf("hit %d: %+v; want allowed, Remaining %d (the limit less the hits so far)", i, d, want)
				}
				if d.ResetAfter < r.Window-time.Minute && alg == floodgate.SlidingWindow {
					t.Fatalf("hit %d: ResetAfter %v; want at least the window", i, d.ResetAfter)
				}
				ds = append(ds, d)
			}
			if n := calls() - before; n > 20 {
				t.Fatalf("200 sequential hits of one key took %d script calls; escrow must decide most from a lease", n)
			}
			// Refund two hits, one twice: both go back, once.
			for _, d := range []floodgate.Decision{ds[199], ds[198], ds[199]} {
				if err := l.Refund(ctx(t), d); err != nil {
					t.Fatal(err)
				}
			}
			d, err := l.Allow(ctx(t), r, "k")
			if err != nil {
				t.Fatal(err)
			}
			if want := r.Limit - 199; !d.Allowed || d.Remaining != want {
				t.Fatalf("after refunding 2 of 200 hits (one twice): %+v, want Remaining %d", d, want)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// 199 hits stand: the store holds exactly those.
			p, err := directOn(t, redistest.Addr(t), prefix).Peek(ctx(t), floodgate.Hit{Rule: r, Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if want := r.Limit - 199 - 1; p.Remaining != want {
				t.Fatalf("after Close: a peek's Remaining %d, want %d; Close must give back every unused unit, and only those", p.Remaining, want)
			}
			// After Close: plain takes.
			d, err = l.Allow(ctx(t), r, "k")
			if err != nil || !d.Allowed || d.Remaining != r.Limit-200 {
				t.Fatalf("Allow after Close: %+v, %v; want a plain take, Remaining %d", d, err, r.Limit-200)
			}
		})
	}
}

// countingStore counts the Takes of the store it wraps.
type countingStore struct {
	floodgate.Store
	takes atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, hits)
}

// TestEscrowResetAndRuleChangeWithinOnePeriod: a Reset through another
// replica reaches a replica's lease within one period; a changed limit
// (an override, a live rule) applies at once on the replica that sees
// it.
func TestEscrowResetAndRuleChangeWithinOnePeriod(t *testing.T) {
	t.Parallel()
	const period = 200 * time.Millisecond
	r := mustRule(t, "escrow-reset", 100, time.Hour, floodgate.SlidingWindow)
	ls := escrowReplicas(t, redistest.Addr(t), 2, period)
	a, b := ls[0], ls[1]
	for range 30 {
		if _, err := a.Allow(ctx(t), r, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Reset(ctx(t), r, "k"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(period + 50*time.Millisecond)
	d, err := a.Allow(ctx(t), r, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != r.Limit-1 {
		t.Fatalf("a period after a Reset through another replica: %+v, want Remaining %d; the reset must reach every replica within one period", d, r.Limit-1)
	}
	for range 20 {
		if _, err := a.Allow(ctx(t), r, "k"); err != nil {
			t.Fatal(err)
		}
	}
	low := r
	low.Limit = 30
	d, err = a.Allow(ctx(t), low, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Limit != 30 || d.Remaining > 30-22 || !d.Allowed {
		t.Fatalf("the limit lowered to 30 after 21 hits: %+v; want Limit 30, Remaining at most 8, at once", d)
	}
}

// TestEscrowOutage: a lease in hand keeps admitting while Redis is
// frozen, until it ends; then the store's error comes back.
func TestEscrowOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const period = 500 * time.Millisecond
	r := mustRule(t, "escrow-outage", 10000, time.Hour, floodgate.TokenBucket)
	ls := escrowReplicas(t, srv.Addr(), 1, period)
	l := ls[0]
	var last floodgate.Decision
	for range 50 {
		d, err := l.Allow(ctx(t), r, "k")
		if err != nil {
			t.Fatal(err)
		}
		last = d
	}
	granted := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Cont()
	d, err := l.Allow(ctx(t), r, "k")
	if err != nil || !d.Allowed || d.Remaining != last.Remaining-1 {
		t.Fatalf("Allow with Redis frozen and a lease in hand: %+v, %v; want allowed from the lease, Remaining %d", d, err, last.Remaining-1)
	}
	time.Sleep(time.Until(granted.Add(period + 50*time.Millisecond)))
	// The lease ended: the next hits go to the (frozen) store.
	var failed bool
	for range 5 {
		if _, err := l.Allow(ctx(t), r, "k"); err != nil {
			if !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("Allow after the lease ended, Redis frozen: %v; want ErrStoreUnavailable", err)
			}
			failed = true
			break
		}
	}
	if !failed {
		t.Fatal("Allow kept admitting a period after the lease ended with Redis frozen; a lease must end on time")
	}
}
