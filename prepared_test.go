package floodgate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// A Prepared rule decides as Allow of that rule does: the same figures,
// key after key, on two stores that share a clock, on the direct path (a
// memory store alone) and with each option that takes the general one;
// and its decisions refund as Allow's do, a key held as its digest too. (The denial cache, which takes
// the general path too, counts down on the real clock: see
// Options.DenialCacheSize.)
func TestPreparedDecidesAsAllow(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts floodgate.Options
	}{
		{"direct", floodgate.Options{}},
		{"overrides", floodgate.Options{Overrides: overrideTo(floodgate.Rule{Name: "x", Limit: 2, Window: time.Minute, Algorithm: floodgate.TokenBucket})}},
	} {
		for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.Concurrency} {
			t.Run(tc.name+"/"+alg.String(), func(t *testing.T) {
				clock := storetest.NewFakeClock()
				newLimiter := func() *floodgate.Limiter {
					s := memstore.New(memstore.Options{Now: clock.Now})
					t.Cleanup(func() { s.Close() })
					l, err := floodgate.New(s, tc.opts)
					if err != nil {
						t.Fatal(err)
					}
					return l
				}
				byAllow, byPrepared := newLimiter(), newLimiter()
				r := floodgate.Rule{Name: "api", Limit: 3, Window: time.Minute, Algorithm: alg}
				p, err := byPrepared.Prepare(r)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				long := strings.Repeat("k", 100) // held as its digest
				for i, key := range []string{"a", "a", "b", "a", "a", "b", "a", long, "a", long} {
					want, werr := byAllow.Allow(ctx, r, key)
					got, gerr := p.Allow(ctx, key)
					if gerr != nil || werr != nil || !reflect.DeepEqual(figures(got), figures(want)) {
						t.Fatalf("decision %d of %q: Prepared.Allow = %+v, %v; Allow = %+v, %v", i, key, got, gerr, want, werr)
					}
					if i == 3 { // a refund of each frees the same room
						if err := byAllow.Refund(ctx, want); err != nil {
							t.Fatal(err)
						}
						if err := byPrepared.Refund(ctx, got); err != nil {
							t.Fatal(err)
						}
					}
					clock.Advance(7 * time.Second)
				}
			})
		}
	}
}

// figures is d without what it holds for Refund, which names the state
// of the store that decided it.
func figures(d floodgate.Decision) floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Recorded: d.Recorded, Policy: d.Policy, Limit: d.Limit, Window: d.Window,
		Remaining: d.Remaining, ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Each: d.Each}
}

// Prepare refuses an invalid rule; a Prepared refuses the keys Allow
// refuses, with Allow's errors.
func TestPreparedRefusesWhatAllowRefuses(t *testing.T) {
	l := newLimiter(t)
	if _, err := l.Prepare(floodgate.Rule{Name: "x", Window: time.Minute}); !errors.Is(err, floodgate.ErrInvalidRule) || !strings.Contains(err.Error(), "limit is 0") {
		t.Fatalf("Prepare of a rule of limit 0: %v; want ErrInvalidRule about the limit", err)
	}
	r := mustRule(t, "r", 3, time.Minute)
	p, err := l.Prepare(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", strings.Repeat("k", bounds.KeyLen+1)} {
		_, want := l.Allow(context.Background(), r, key)
		d, err := p.Allow(context.Background(), key)
		if !errors.Is(err, floodgate.ErrInvalidHit) || err.Error() != want.Error() || !reflect.DeepEqual(d, floodgate.Decision{}) {
			t.Errorf("Prepared.Allow of a key of %d bytes = %+v, %v; want a zero Decision and Allow's error %v", len(key), d, err, want)
		}
	}
}
