package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/rueidis"
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
			clock := storetest.NewFakeClock()
			mini := miniredis.RunT(t)
			mini.SetTime(clock.Now())
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mini.Addr()}, ForceSingleClient: true, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			rs, err := redisstore.New(ctx, redisstore.Options{Client: rc})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			ms := memstore.New(memstore.Options{Now: clock.Now})
			defer ms.Close()
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
					res, err := s.Take(ctx, fmt.Sprintf("take-%d", i), hits)
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
