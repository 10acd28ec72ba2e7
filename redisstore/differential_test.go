package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
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
			differential(t, alg, trace{limit: 5, minCost: 1, maxCost: 2, maxStep: 200 * time.Millisecond}, 4_000)
		})
	}
}

// TestDifferentialLongRing replays traces on sliding windows of limits 40
// and 7 (costs 1 to 3, and always 2): rings that fill, wrap (a cost of 2
// that overwrites the last slot and the first), and lose more than 8
// entries at once (which take.lua's quick path leaves to the general
// path).
func TestDifferentialLongRing(t *testing.T) {
	for _, tr := range []trace{
		{limit: 40, minCost: 1, maxCost: 3, maxStep: 40 * time.Millisecond},
		{limit: 7, minCost: 2, maxCost: 2, maxStep: 100 * time.Millisecond}, // full rings whose takes wrap
	} {
		t.Run(fmt.Sprintf("limit %d", tr.limit), func(t *testing.T) {
			t.Parallel()
			differential(t, floodgate.SlidingWindow, tr, 4_000)
		})
	}
}

// TestDifferentialLimitChanges replays traces whose checks name the rule
// at one of several limits (one name and window: one state), as a
// configuration reloaded between requests does: rings that shrink below
// their count, grow while wrapped, and are refunded across a change.
func TestDifferentialLimitChanges(t *testing.T) {
	for _, tr := range []trace{
		{limit: 6, minCost: 1, maxCost: 2, maxStep: 150 * time.Millisecond, limits: []int64{6, 3, 10}},
		{limit: 12, minCost: 1, maxCost: 3, maxStep: 60 * time.Millisecond, limits: []int64{12, 5, 20, 9}},
	} {
		for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
			t.Run(fmt.Sprintf("%s limits %v", alg, tr.limits), func(t *testing.T) {
				t.Parallel()
				differential(t, alg, tr, 4_000)
			})
		}
	}
}

// TestDifferentialOverdraw replays traces where a quarter of the hits are
// Overdraw (floodgate.Hit.Overdraw), of costs up to three times the limit
// and now and then the largest a hit may have, which carries a state past
// its bound: debts recorded past the limit, worked off, refunded, carried
// into a rule of another limit, and states renewed at their bounds must
// give identical decisions in Go and in Lua.
func TestDifferentialOverdraw(t *testing.T) {
	for _, tr := range []trace{
		{limit: 5, minCost: 1, maxCost: 2, maxStep: 300 * time.Millisecond, overdraw: 12},
		{limit: 6, minCost: 1, maxCost: 3, maxStep: 250 * time.Millisecond, overdraw: 15, limits: []int64{6, 3, 10}},
	} {
		for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
			t.Run(fmt.Sprintf("%s limits %v", alg, tr.limits), func(t *testing.T) {
				t.Parallel()
				differential(t, alg, tr, 4_000)
			})
		}
	}
}

// TestDifferentialLeases replays traces where a quarter of the single
// checks are leases (floodgate.Hit.Lease, taken at the stores as the
// Limiter's escrow takes them, of costs up to a quarter of the limit and
// periods up to a second), and some refunds give back a lease's unused
// units: leases checked at their grant and recorded at their end, cut at
// a window's end, and refunded later must give identical results in Go
// and in Lua.
func TestDifferentialLeases(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			differential(t, alg, trace{limit: 20, minCost: 1, maxCost: 2, maxStep: 200 * time.Millisecond, leases: true}, 4_000)
		})
	}
}

// miniAndMemstore returns a fake clock, a miniredis on it, a redisstore on
// that miniredis and a memstore on the same clock (the reference), all
// closed when the test ends.
func miniAndMemstore(t *testing.T) (*storetest.FakeClock, *miniredis.Miniredis, *redisstore.Store, *memstore.Store) {
	t.Helper()
	clock := storetest.NewFakeClock()
	mini := miniredis.RunT(t)
	mini.SetTime(clock.Now())
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mini.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	rs, err := redisstore.New(context.Background(), redisstore.Options{Client: rc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	ms := memstore.New(memstore.Options{Now: clock.Now})
	t.Cleanup(func() { ms.Close() })
	return clock, mini, rs, ms
}

// trace is the shape of a differential trace: the rule's limit (per
// second), the least and largest cost of a hit and the longest step of the
// clock; limits, if any, are limits the rule changes to at random before
// each operation; overdraw, if not zero, makes a quarter of the hits
// Overdraw, of costs 1 to overdraw, and one in twenty of those of the
// largest cost a hit may have; leases makes a quarter of the single
// checks leases (TestDifferentialLeases).
type trace struct {
	limit, minCost, maxCost int64
	maxStep                 time.Duration
	limits                  []int64
	overdraw                int64
	leases                  bool
}

func differential(t *testing.T, alg floodgate.Algorithm, tr trace, ops int) {
	ctx := context.Background()
	clock, mini, rs, ms := miniAndMemstore(t)
	// Limits and windows whose intervals are whole microseconds, so that
	// the store's microseconds and memstore's nanoseconds agree exactly.
	rule, err := floodgate.NewRule("diff", tr.limit, time.Second, alg)
	if err != nil {
		t.Fatal(err)
	}
	rules := []floodgate.Rule{rule}
	for _, limit := range tr.limits {
		r, err := floodgate.NewRule("diff", limit, time.Second, alg)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	var ls [2]*floodgate.Limiter // memstore, redisstore
	for i, s := range []floodgate.Store{ms, rs} {
		if ls[i], err = floodgate.New(s, floodgate.Options{Timeout: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(4, uint64(alg)))
	var past [][2]floodgate.Decision
	var leases [][2]floodgate.Receipt // memstore's and redisstore's grant of each lease
	stats := map[string]int{}
	for i := range ops {
		if rng.IntN(3) == 0 {
			d := time.Duration(rng.Int64N(tr.maxStep.Microseconds())) * time.Microsecond
			clock.Advance(d)
			mini.SetTime(clock.Now())
			mini.FastForward(d)
		}
		if len(tr.limits) > 0 {
			rule = rules[rng.IntN(len(rules))]
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
		case op < 2 && len(leases) > 0:
			// A lease's unused units go back: some of its cost, a recent
			// lease's mostly.
			g := leases[len(leases)-1-rng.IntN(min(len(leases), 3))]
			unused := 1 + rng.Int64N(g[0].Hit.Cost)
			for s, st := range []floodgate.Store{ms, rs} {
				r := g[s]
				r.Hit.Cost = unused
				if err := st.Refund(ctx, []floodgate.Receipt{r}); err != nil {
					t.Fatal(err)
				}
			}
			stats["lease refund"]++
		case tr.leases && op >= 5 && op < 9:
			h := floodgate.Hit{Rule: rule, Key: []string{"a", "b"}[rng.IntN(2)], Cost: 1 + rng.Int64N(tr.limit/4),
				Lease: time.Duration(1+rng.Int64N(1_000_000)) * time.Microsecond}
			var got [2]floodgate.Result
			for s, st := range []floodgate.Store{ms, rs} {
				res, err := st.Take(ctx, []floodgate.Hit{h})
				if err != nil {
					t.Fatal(err)
				}
				got[s] = res[0]
			}
			us := func(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }
			fig := func(r floodgate.Result) [6]int64 {
				return [6]int64{btoi(r.Allowed), r.Remaining, us(r.ResetAfter), us(r.RetryAfter), us(r.Lease), r.Stamp.At.UnixMicro()}
			}
			if fig(got[0]) != fig(got[1]) {
				t.Fatalf("op %d: lease %+v:\nmemstore   %+v\nredisstore %+v", i, h, got[0], got[1])
			}
			if got[0].Allowed {
				leases = append(leases, [2]floodgate.Receipt{{Hit: h, Stamp: got[0].Stamp}, {Hit: h, Stamp: got[1].Stamp}})
				stats["lease"]++
			} else {
				stats["lease denied"]++
			}
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
			hit := func(key string) floodgate.Hit {
				h := floodgate.Hit{Rule: rule, Key: key, Cost: tr.minCost + rng.Int64N(tr.maxCost-tr.minCost+1)}
				if tr.overdraw > 0 && rng.IntN(4) == 0 {
					h.Overdraw, h.Cost = true, 1+rng.Int64N(tr.overdraw)
					if rng.IntN(20) == 0 {
						h.Cost = bounds.Limit
						if alg == floodgate.SlidingWindow {
							h.Cost = bounds.SlidingCost
						}
					}
				}
				return h
			}
			hits := []floodgate.Hit{hit("a")}
			if rng.IntN(2) == 0 {
				hits = append(hits, hit("b"))
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
			switch {
			case got[0].Allowed:
				stats["allowed"]++
			case got[0].Recorded:
				stats["overdrawn"]++ // recorded past a limit
			default:
				stats["denied"]++
			}
			if got[0].Recorded {
				past = append(past, got)
			}
		}
	}
	if stats["allowed"] < 200 || stats["denied"] < 200 || stats["refund"] < 200 || stats["reset"] < 50 ||
		tr.overdraw > 0 && stats["overdrawn"] < 200 ||
		tr.leases && (stats["lease"] < 200 || stats["lease denied"] < 100 || stats["lease refund"] < 100) {
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
	fig := func(d floodgate.Decision) [7]int64 {
		return [7]int64{btoi(d.Allowed), btoi(d.Recorded), d.Limit, d.Remaining, us(d.ResetAfter), us(d.RetryAfter), int64(len(d.Each))}
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
			" recorded=" + map[bool]string{true: "1", false: "0"}[e.Recorded] +
			" rem=" + strconv.FormatInt(e.Remaining, 10) + " reset=" + e.ResetAfter.String() + " retry=" + e.RetryAfter.String() + "]"
	}
	return s
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestRingWrapsExactly walks a ring of limit 3 on a controlled clock until
// a take of cost 2 overwrites its last slot and its first (the ring's
// wrap), then checks that both of that take's times count: a denial of
// cost 3 names the second, in slot 0, as the time that frees room, as
// memstore does.
func TestRingWrapsExactly(t *testing.T) {
	ctx := context.Background()
	clock, mini, rs, ms := miniAndMemstore(t)
	rule, err := floodgate.NewRule("wrap", 3, time.Second, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	ms2 := time.Millisecond
	for i, step := range []struct {
		at        time.Duration // since the first take
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, 1, true, 2, 0},
		{100 * ms2, 1, true, 1, 0},
		{200 * ms2, 1, true, 0, 0},           // full: slots 0, 1, 2
		{1050 * ms2, 1, true, 0, 0},          // the first left: slot 0, head 1
		{1150 * ms2, 1, true, 0, 0},          // slot 1, head 2
		{2060 * ms2, 2, true, 0, 0},          // 0.2 and 1.05 left: slots 2 and 0
		{2500 * ms2, 3, false, 1, 560 * ms2}, // room for 3 once the wrapped take's second time (slot 0) leaves, at 3.06
		{3100 * ms2, 2, true, 1, 0},
	} {
		now := storetest.NewFakeClock().Now().Add(step.at)
		if d := now.Sub(clock.Now()); d > 0 {
			clock.Advance(d)
			mini.SetTime(clock.Now())
			mini.FastForward(d)
		}
		for name, s := range map[string]floodgate.Store{"memstore": ms, "redisstore": rs} {
			res, err := s.Take(ctx, []floodgate.Hit{{Rule: rule, Key: "k", Cost: step.cost}})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Allowed != step.allowed || r.Remaining != step.remaining || r.RetryAfter != step.retry {
				t.Fatalf("%s, step %d at %v, cost %d: allowed %v, remaining %d, retry %v; want %v, %d, %v", name, i, step.at, step.cost, r.Allowed, r.Remaining, r.RetryAfter, step.allowed, step.remaining, step.retry)
			}
		}
	}
}
