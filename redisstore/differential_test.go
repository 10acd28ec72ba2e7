package redisstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/rueidis"
)

// TestDifferentialAgainstMemstore replays one random trace of checks (of
// one key or two), refunds (whole, and of one hit), repeated refunds and
// Resets on memstore and on redisstore, both on one controlled clock: the
// memstore's is injected, and redisstore runs its Lua scripts on miniredis
// with TIME set (and TTLs moved) to the same instant. Two implementations
// of the same contract, in Go and in Lua, must give identical decisions,
// every figure compared.
func TestDifferentialAgainstMemstore(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			differential(t, alg, 4_000)
		})
	}
}

func differential(t *testing.T, alg floodgate.Algorithm, ops int) {
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
	// Limits and windows whose intervals are whole microseconds, so that
	// the store's microseconds and memstore's nanoseconds agree exactly.
	rule, err := floodgate.NewRule("diff", 5, time.Second, alg)
	if err != nil {
		t.Fatal(err)
	}
	var ls [2]*floodgate.Limiter // memstore, redisstore
	for i, s := range []floodgate.Store{ms, rs} {
		if ls[i], err = floodgate.New(s, floodgate.Options{Timeout: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(4, uint64(alg)))
	var past [][2]floodgate.Decision
	stats := map[string]int{}
	for i := range ops {
		if rng.IntN(3) == 0 {
			d := time.Duration(rng.Int64N(200_000)) * time.Microsecond
			clock.Advance(d)
			mini.SetTime(clock.Now())
			mini.FastForward(d)
		}
		switch op := rng.IntN(20); {
		case op == 0:
			k := []string{"a", "b"}[rng.IntN(2)]
			for _, l := range ls {
				if err := l.Reset(ctx, rule, k); err != nil {
					t.Fatal(err)
				}
			}
			stats["reset"]++
		case op < 5 && len(past) > 0:
			// Mostly a recent decision, whose refund still credits
			// something (a token bucket's credit runs out with time),
			// sometimes any.
			p := past[rng.IntN(len(past))]
			if rng.IntN(4) != 0 {
				p = past[len(past)-1-rng.IntN(min(len(past), 4))]
			}
			j := -1
			if len(p[0].Each) == 2 && rng.IntN(2) == 0 {
				j = rng.IntN(2)
			}
			for s, l := range ls {
				d := p[s]
				if j >= 0 {
					d = d.Each[j]
				}
				if err := l.Refund(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			stats["refund"]++
		default:
			hits := []floodgate.Hit{{Rule: rule, Key: "a", Cost: 1 + rng.Int64N(2)}}
			if rng.IntN(2) == 0 {
				hits = append(hits, floodgate.Hit{Rule: rule, Key: "b", Cost: 1 + rng.Int64N(2)})
			}
			var got [2]floodgate.Decision
			for s, l := range ls {
				if got[s], err = l.Check(ctx, hits...); err != nil {
					t.Fatal(err)
				}
			}
			if !same(got[0], got[1]) {
				t.Fatalf("op %d: check %v:\nmemstore   %s\nredisstore %s", i, hits, show(got[0]), show(got[1]))
			}
			if got[0].Allowed {
				past = append(past, got)
				stats["allowed"]++
			} else {
				stats["denied"]++
			}
		}
	}
	if stats["allowed"] < 200 || stats["denied"] < 200 || stats["refund"] < 200 || stats["reset"] < 50 {
		t.Fatalf("the trace does not exercise every operation: %v", stats)
	}
}

// same compares every public figure of two decisions and of their Each.
// Durations are compared in whole microseconds, rounded up: the scripts
// compute in microseconds, memstore in nanoseconds, and a counter's
// RetryAfter divides by its previous count (177.706334ms in memstore is
// 177.707ms in Redis, never less).
func same(a, b floodgate.Decision) bool {
	us := func(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }
	fig := func(d floodgate.Decision) [6]int64 {
		return [6]int64{btoi(d.Allowed), d.Limit, d.Remaining, us(d.ResetAfter), us(d.RetryAfter), int64(len(d.Each))}
	}
	if fig(a) != fig(b) || a.Policy != b.Policy {
		return false
	}
	for i := range a.Each {
		if fig(a.Each[i]) != fig(b.Each[i]) {
			return false
		}
	}
	return true
}

func show(d floodgate.Decision) string {
	s := ""
	for _, e := range append([]floodgate.Decision{d}, d.Each...) {
		s += " [" + e.Policy + " allowed=" + map[bool]string{true: "1", false: "0"}[e.Allowed] +
			" rem=" + time.Duration(e.Remaining).String() + " reset=" + e.ResetAfter.String() + " retry=" + e.RetryAfter.String() + "]"
	}
	return s
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
