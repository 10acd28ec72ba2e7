package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestClockStepBackKeepsTheRing: when the server's clock steps back (a
// failover to a replica whose clock is behind), a sliding window records
// a take at its newest time, not before it, to keep the ring in order;
// those times weigh until newest + window, so the key must live that
// long, not window from the stepped-back now (PEXPIRE counts from the
// call, on the server's real time). memstore, on the same clock, is the
// reference. Both the quick path (a group of one) and the general path (a
// group of two keys) are walked.
func TestClockStepBackKeepsTheRing(t *testing.T) {
	const back = 5 * time.Second
	for _, keys := range [][]string{{"k"}, {"k", "other"}} {
		t.Run(fmt.Sprintf("%d keys", len(keys)), func(t *testing.T) {
			ctx := context.Background()
			clock, mini, rs, ms := miniAndMemstore(t)
			rule, err := floodgate.NewRule("back", 2, 10*time.Second, floodgate.SlidingWindow)
			if err != nil {
				t.Fatal(err)
			}
			var hits []floodgate.Hit
			for _, k := range keys {
				hits = append(hits, floodgate.Hit{Rule: rule, Key: k, Cost: 1})
			}
			// elapsed moves the server's time by d and its TTLs by real,
			// the real time that passed.
			elapsed := func(d, real time.Duration) {
				clock.Advance(d)
				mini.SetTime(clock.Now())
				mini.FastForward(real)
			}
			for i, step := range []struct {
				d, real time.Duration
				allowed bool
			}{
				{0, 0, true},     // at T
				{-back, 0, true}, // the clock steps back to T-5s: recorded at T
				{10*time.Second + time.Millisecond, 10*time.Second + time.Millisecond, false}, // T+5.001s: both times of T are in the window
				{5 * time.Second, 5 * time.Second, true},                                      // T+10.001s: they left
			} {
				elapsed(step.d, step.real)
				for name, s := range map[string]floodgate.Store{"memstore": ms, "redisstore": rs} {
					res, err := s.Take(ctx, hits)
					if err != nil {
						t.Fatal(err)
					}
					if res[0].Allowed != step.allowed {
						t.Errorf("%s, step %d (clock %+v after T): allowed %v, want %v (ring of limit 2 holding two takes recorded at T, window 10s)", name, i, clock.Now().Sub(storetest.NewFakeClock().Now()), res[0].Allowed, step.allowed)
					}
				}
			}
		})
	}
}

// TestRefundAfterClockStepBack: a take made while the server's clock was
// behind the ring's newest time is recorded at that newest time, not at
// the take's own (its stamp's); its refund must still find it and credit
// it, on both stores (memstore on the same clock as the reference). The
// last step checks that such a refund never frees more than its take.
func TestRefundAfterClockStepBack(t *testing.T) {
	ctx := context.Background()
	clock, mini, rs, ms := miniAndMemstore(t)
	rule, err := floodgate.NewRule("backrefund", 3, 10*time.Second, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	stores := []struct {
		name string
		l    *floodgate.Limiter
	}{{"memstore", nil}, {"redisstore", nil}}
	for i, s := range []floodgate.Store{ms, rs} {
		if stores[i].l, err = floodgate.New(s, floodgate.Options{Timeout: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(d time.Duration) {
		clock.Advance(d)
		mini.SetTime(clock.Now())
		if d > 0 {
			mini.FastForward(d)
		}
	}
	var taken [2][]floodgate.Decision
	take := func(want bool) {
		t.Helper()
		for i, s := range stores {
			d, err := s.l.Allow(ctx, rule, "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Fatalf("%s at %v: allowed %v, want %v", s.name, clock.Now().Format("15:04:05.000"), d.Allowed, want)
			}
			taken[i] = append(taken[i], d)
		}
	}
	refund := func(n int) {
		t.Helper()
		for i, s := range stores {
			if err := s.l.Refund(ctx, taken[i][n]); err != nil {
				t.Fatal(err)
			}
		}
	}
	take(true)             // 0 at T
	step(-2 * time.Second) // the clock steps back
	take(true)             // 1 stamped T-2s, recorded at T
	step(time.Second)
	take(true)  // 2 stamped T-1s, recorded at T
	take(false) // full
	refund(1)   // frees one
	take(true)  // 4, at T-1s: recorded at T
	take(false) // full again: the refund freed one, not more
	refund(1)   // again: nothing
	take(false)
	refund(2)
	refund(4)
	take(true)
	take(true)
	take(false)
}
