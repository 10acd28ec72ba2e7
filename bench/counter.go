package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// fakeClock is a clock the trace moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// counterError replays one trace through the exact sliding-window log and
// the sliding-window counter (memstore, on a simulated clock) and prints
// how their decisions differ. The trace: one key, 100 requests per minute
// allowed, 60 minutes of Poisson arrivals at 1.2 times the limit, plus a
// burst of 50 requests at a random instant every 3 minutes.
func counterError(out io.Writer) error {
	const (
		limit   = 100
		minutes = 60
	)
	rng := rand.New(rand.NewPCG(6, 6))
	start := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	var arrivals []time.Duration
	for t := time.Duration(0); t < minutes*window; {
		t += time.Duration(rng.ExpFloat64() * float64(window) / (1.2 * limit))
		arrivals = append(arrivals, t)
	}
	for m := 0; m < minutes; m += 3 {
		at := time.Duration(m)*window + time.Duration(rng.Int64N(int64(window)))
		for range 50 {
			arrivals = append(arrivals, at)
		}
	}
	sortDurations(arrivals)

	type run struct {
		alg      floodgate.Algorithm
		clock    *fakeClock
		l        *floodgate.Limiter
		r        floodgate.Rule
		admitted []time.Duration
		close    func()
	}
	runs := make([]*run, 2)
	for i, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.SlidingWindowCounter} {
		c := &fakeClock{now: start}
		s := memstore.New(memstore.Options{Now: c.Now})
		l, err := floodgate.New(s, floodgate.Options{})
		if err != nil {
			return err
		}
		r, err := floodgate.NewRule("trace", limit, window, alg)
		if err != nil {
			return err
		}
		runs[i] = &run{alg: alg, clock: c, l: l, r: r, close: func() { s.Close() }}
		defer runs[i].close()
	}
	var agree, falseAllow, falseDeny int
	for _, at := range arrivals {
		var got [2]bool
		for i, rn := range runs {
			rn.clock.set(start.Add(at))
			d, err := rn.l.Allow(context.Background(), rn.r, "k")
			if err != nil {
				return err
			}
			got[i] = d.Allowed
			if d.Allowed {
				rn.admitted = append(rn.admitted, at)
			}
		}
		switch {
		case got[0] == got[1]:
			agree++
		case got[1]:
			falseAllow++
		default:
			falseDeny++
		}
	}
	worst := func(adm []time.Duration) int {
		best, j := 0, 0
		for i := range adm { // the most admissions in any window (t-W, t]
			for adm[i]-adm[j] >= window {
				j++
			}
			best = max(best, i-j+1)
		}
		return best
	}
	n := len(arrivals)
	fmt.Fprintf(out, "Sliding-window counter against the exact log, one trace (memstore, simulated clock): %d requests on one key in %d windows,\n", n, minutes)
	fmt.Fprintf(out, "limit %d per %v, Poisson arrivals at 1.2x the limit plus a burst of 50 every 3 windows:\n", limit, window)
	fmt.Fprintf(out, "  admitted: log %d, counter %d (%+.1f%%)\n", len(runs[0].admitted), len(runs[1].admitted),
		100*(float64(len(runs[1].admitted))/float64(len(runs[0].admitted))-1))
	fmt.Fprintf(out, "  decisions that differ: %d of %d (%.2f%%): %d allowed that the log denies, %d denied that the log allows\n",
		n-agree, n, 100*float64(n-agree)/float64(n), falseAllow, falseDeny)
	fmt.Fprintf(out, "  most admitted in any sliding window of %v: log %d, counter %d (limit %d)\n", window, worst(runs[0].admitted), worst(runs[1].admitted), limit)
	return nil
}

func sortDurations(d []time.Duration) {
	// insertion of the bursts into an almost sorted slice
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}
