package memstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestConcurrentDecisionsAreExact: goroutines deciding one hot key of each
// algorithm at once, on a clock that stands still, while others add keys
// (which grows the shards' tables) and remove them (which shifts entries
// back), admit exactly each limit, and every denial carries the figures
// of a key at its limit. A decision that misses its entry, finds another
// key's, or records without holding its lock admits a different count.
func TestConcurrentDecisionsAreExact(t *testing.T) {
	const limit, workers, tries = 100, 8, 100
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now}, 2, 0)) // 2 shards: long probes
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	algs := []floodgate.Algorithm{floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.SlidingWindow}
	type count struct {
		sync.Mutex
		allowed int
		denial  map[fig]int
	}
	counts := make([]count, len(algs))
	rules := make([]floodgate.Rule, len(algs))
	takes := make([]func(context.Context, string) (floodgate.Result, error), len(algs))
	for i, alg := range algs {
		rules[i] = mustRule(t, limit, time.Minute, alg, 0)
		takes[i] = s.TakeFunc(rules[i])
		counts[i].denial = map[fig]int{}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := range tries {
				for i := range algs {
					var r floodgate.Result
					var err error
					if n%2 == 0 { // both paths: a prepared rule's and a hit's
						r, err = takes[i](ctx, "hot")
					} else {
						r, err = s.TakeOne(ctx, floodgate.Hit{Rule: rules[i], Key: "hot", Cost: 1})
					}
					if err != nil {
						t.Error(err)
						return
					}
					c := &counts[i]
					c.Lock()
					if r.Allowed {
						c.allowed++
					} else {
						c.denial[figOf(r)]++
					}
					c.Unlock()
				}
				// A new key, and one added and removed.
				k := strconv.Itoa(w) + "-" + strconv.Itoa(n)
				for _, key := range []string{"cold-" + k, "gone-" + k} {
					r, err := takes[0](ctx, key)
					if err != nil || !r.Allowed || r.Remaining != limit-1 {
						t.Errorf("first take of %s: %+v, %v; want allowed with %d remaining", key, r, err, limit-1)
					}
				}
				if err := s.Reset(ctx, rules[0], "gone-"+k); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// At a standing clock: a bucket full after limit takes refills one
	// token per window/limit; the windows end at the minute (the fake
	// clock starts on one), and the counter's previous window is empty.
	const interval = time.Minute / limit
	wantDenial := []fig{
		{false, 0, time.Minute, interval},
		{false, 0, time.Minute, time.Minute},
		{false, 0, 2 * time.Minute, time.Minute + interval}, // once the full window weighs limit-1
		{false, 0, time.Minute, time.Minute},
	}
	for i, alg := range algs {
		c := &counts[i]
		want := map[fig]int{wantDenial[i]: workers*tries - limit}
		if c.allowed != limit || len(c.denial) != 1 || c.denial[wantDenial[i]] != want[wantDenial[i]] {
			t.Errorf("%v: %d allowed, denials %v; want %d allowed, denials %v", alg, c.allowed, c.denial, limit, want)
		}
	}
	if n := s.Len(); n != len(algs)+workers*tries {
		t.Errorf("%d keys held; want %d (the hot keys and the cold ones, none of the removed)", n, len(algs)+workers*tries)
	}
}
