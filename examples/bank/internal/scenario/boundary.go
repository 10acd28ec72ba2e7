package scenario

import (
	"context"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// boundary replays the same trace against a fixed and a sliding window of
// 10 per minute on a simulated clock: 10 requests just before a minute
// boundary and 10 just after it.
func boundary(ctx context.Context, out *report) error {
	out.title("7. Window boundary: 10/min, 10 requests at 0:59.9 and 10 at 1:00.1 (simulated clock)")
	out.row("algorithm", "admitted in 0.2s", "limit")
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		clock := storetest.NewFakeClock() // starts on a whole minute
		store := memstore.New(memstore.Options{Now: clock.Now})
		limiter, err := floodgate.New(store, floodgate.Options{})
		if err != nil {
			return err
		}
		rule, err := floodgate.NewRule("pix", 10, time.Minute, alg)
		if err != nil {
			return err
		}
		admitted := 0
		clock.Advance(time.Minute - 100*time.Millisecond)
		for i := range 20 {
			if i == 10 {
				clock.Advance(200 * time.Millisecond)
			}
			d, err := limiter.Allow(ctx, rule, "account")
			if err != nil {
				return err
			}
			if d.Allowed {
				admitted++
			}
		}
		store.Close()
		out.row(alg, admitted, 10)
		want := 10
		if alg == floodgate.FixedWindow {
			want = 20 // the weakness the sliding window exists to avoid
		}
		out.expect(admitted == want, "%v: %d admitted within 0.2s around the boundary (expected %d)", alg, admitted, want)
	}
	return nil
}
