package oracle

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// at is a zero-width span at base plus ms milliseconds.
func at(ms ...float64) []Span {
	var s []Span
	for _, m := range ms {
		t := base + int64(m*float64(time.Millisecond))
		s = append(s, Span{Lo: t, Hi: t})
	}
	return s
}

// base is a Unix time on a window's edge for every window below.
const base = int64(1_796_000_000) * int64(time.Second)

func rule(alg floodgate.Algorithm, limit int64, burst int64) floodgate.Rule {
	return floodgate.Rule{Name: "r", Limit: limit, Window: time.Second, Algorithm: alg, Burst: burst}
}

// TestCheckExactLimit checks, for each algorithm, a log at exactly the
// limit (0 over) and the same log with one admission too many (1 over).
func TestCheckExactLimit(t *testing.T) {
	for _, c := range []struct {
		name       string
		rule       floodgate.Rule
		exact, one []Span
	}{
		// 3 per second: the entry at 0 leaves the window at 1000.
		{"sliding", rule(floodgate.SlidingWindow, 3, 0),
			at(0, 100, 200, 1000, 1100, 1200, 2199),
			at(0, 100, 200, 999.999, 1000, 1100, 1200, 2199)},
		// 2 per aligned second.
		{"fixed", rule(floodgate.FixedWindow, 2, 0),
			at(100, 999.999, 1000, 1500, 2999),
			at(100, 500, 999.999, 1000, 1500, 2999)},
		// 4 per second: at 1500 the previous 4 weigh ceil(2) = 2, at
		// 1600 ceil(1.6) = 2, at 1700 ceil(1.2) = 2, at 1800 ceil(0.8) = 1.
		{"counter", rule(floodgate.SlidingWindowCounter, 4, 0),
			at(0, 1, 2, 3, 1500, 1600, 1800),
			at(0, 1, 2, 3, 1500, 1600, 1700, 1800)},
		// 10 per second (T = 100 ms), burst 3: 3 at once, then one per T;
		// full again after 300 quiet.
		{"bucket", rule(floodgate.TokenBucket, 10, 3),
			at(0, 0, 0, 100, 200, 300, 1000, 1000, 1000, 1100),
			at(0, 0, 0, 100, 199.999, 200, 300, 1000, 1000, 1000, 1100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Check(c.rule, shuffled(c.exact), 0); got.Over != 0 || got.Total != len(c.exact) {
				t.Errorf("at the limit: %v, want over-admissions: 0 of %d", got, len(c.exact))
			}
			if got := Check(c.rule, shuffled(c.one), 0); got.Over != 1 || got.Total != len(c.one) {
				t.Errorf("one too many: %v, want over-admissions: 1 of %d", got, len(c.one))
			}
		})
	}
}

func shuffled(s []Span) []Span {
	s = append([]Span(nil), s...)
	rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// span is [lo, hi] in milliseconds after base.
func span(lo, hi float64) Span {
	return Span{Lo: base + int64(lo*float64(time.Millisecond)), Hi: base + int64(hi*float64(time.Millisecond))}
}

// TestCheckUncertainty checks that an admission counts past the limit
// only when it is past it wherever in their spans the admissions were,
// slack included.
func TestCheckUncertainty(t *testing.T) {
	for _, c := range []struct {
		name  string
		rule  floodgate.Rule
		spans []Span
		slack time.Duration
		over  int
	}{
		// Limit 1 per second: the second may be 1200 after the first.
		{"sliding maybe apart", rule(floodgate.SlidingWindow, 1, 0), []Span{span(0, 500), span(600, 1200)}, 0, 0},
		{"sliding surely close", rule(floodgate.SlidingWindow, 1, 0), []Span{span(0, 500), span(600, 900)}, 0, 1},
		{"sliding close, slack apart", rule(floodgate.SlidingWindow, 1, 0), []Span{span(0, 500), span(600, 900)}, 50 * time.Millisecond, 0},
		// A span that is all inside another: the walk by the latest time
		// must still see both (one of them first).
		{"sliding nested", rule(floodgate.SlidingWindow, 1, 0), []Span{span(0, 900), span(400, 500)}, 0, 1},
		// Limit 2: a wide span kept after a narrow one starts earlier;
		// the one at 1300 is 2 with the narrow one only.
		{"sliding wide after narrow", rule(floodgate.SlidingWindow, 2, 0), []Span{span(500, 600), span(0, 700), span(1300, 1400)}, 0, 0},
		// Limit 1 per aligned second: a span across the edge is in neither.
		{"fixed across the edge", rule(floodgate.FixedWindow, 1, 0), []Span{span(100, 200), span(900, 1100)}, 0, 0},
		{"fixed inside", rule(floodgate.FixedWindow, 1, 0), []Span{span(100, 200), span(800, 999)}, 0, 1},
		{"fixed inside, slack across", rule(floodgate.FixedWindow, 1, 0), []Span{span(100, 200), span(800, 999)}, 2 * time.Millisecond, 0},
		// Limit 2: 2 in the previous second weigh ceil(2*(1000-t)/1000)
		// at t into this one, 2 until t = 500, then 1.
		{"counter late enough", rule(floodgate.SlidingWindowCounter, 2, 0), []Span{span(100, 100), span(200, 200), span(1400, 1500)}, 0, 0},
		{"counter surely early", rule(floodgate.SlidingWindowCounter, 2, 0), []Span{span(100, 100), span(200, 200), span(1400, 1499)}, 0, 1},
		// 10 per second, burst 1: two may be 100 apart.
		{"bucket maybe apart", rule(floodgate.TokenBucket, 10, 1), []Span{span(0, 50), span(60, 100)}, 0, 0},
		{"bucket surely close", rule(floodgate.TokenBucket, 10, 1), []Span{span(0, 50), span(60, 99)}, 0, 1},
		{"bucket nested", rule(floodgate.TokenBucket, 10, 1), []Span{span(0, 99), span(40, 50)}, 0, 1},
		// Burst 1: the wide span may be 100 before the first; the last is
		// 90 after the first, wherever the wide one was.
		{"bucket wide after narrow", rule(floodgate.TokenBucket, 10, 1), []Span{span(100, 100), span(0, 150), span(190, 190)}, 0, 1},
		{"bucket close, slack apart", rule(floodgate.TokenBucket, 10, 1), []Span{span(0, 50), span(60, 99)}, time.Millisecond, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Check(c.rule, shuffled(c.spans), c.slack); got.Over != c.over || got.Total != len(c.spans) {
				t.Errorf("%v, want over-admissions: %d of %d", got, c.over, len(c.spans))
			}
		})
	}
}

// TestCheckFromOrigin checks fixed windows moved off the epoch by an
// origin: 2 per second with windows from 300 on, the same admissions
// that fit the epoch's windows break the moved ones, and the other way
// round; a sliding log's check does not move.
func TestCheckFromOrigin(t *testing.T) {
	// Each epoch second holds 2 of these; [300, 1300) holds 3.
	epochFit := at(100, 400, 1100, 1200)
	// [-700, 300) holds 2, [300, 1300) and [1300, 2300) 1 each; [0, 1000)
	// holds 3.
	movedFit := at(100, 200, 400, 1400)
	origin := 300 * time.Millisecond
	for _, c := range []struct {
		name   string
		rule   floodgate.Rule
		spans  []Span
		origin time.Duration
		over   int
	}{
		{"fixed epoch fit, on the epoch", rule(floodgate.FixedWindow, 2, 0), epochFit, 0, 0},
		{"fixed epoch fit, moved", rule(floodgate.FixedWindow, 2, 0), epochFit, origin, 1},
		{"fixed moved fit, on the epoch", rule(floodgate.FixedWindow, 2, 0), movedFit, 0, 1},
		{"fixed moved fit, moved", rule(floodgate.FixedWindow, 2, 0), movedFit, origin, 0},
		// Limit 2: at 1350 the epoch's previous window holds 2, which
		// weigh ceil(2*650/1000) = 2; the moved one's holds none.
		{"counter moved", rule(floodgate.SlidingWindowCounter, 2, 0), at(100, 200, 1350), origin, 0},
		{"counter on the epoch", rule(floodgate.SlidingWindowCounter, 2, 0), at(100, 200, 1350), 0, 1},
		// 400 is less than a second after 100 and 200, wherever windows start.
		{"sliding moved", rule(floodgate.SlidingWindow, 2, 0), movedFit, origin, 1},
		{"sliding on the epoch", rule(floodgate.SlidingWindow, 2, 0), movedFit, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := CheckFrom(c.rule, shuffled(c.spans), 0, c.origin); got.Over != c.over || got.Total != len(c.spans) {
				t.Errorf("%v, want over-admissions: %d of %d", got, c.over, len(c.spans))
			}
		})
	}
}

// TestCheckAgreesWithMemstore replays random arrivals through memstore on
// an injected clock: the check of what it admitted finds 0 over, and 1
// once any single arrival it denied is added as admitted. So the check is
// each algorithm's own rule, and as tight as it (with exact times).
func TestCheckAgreesWithMemstore(t *testing.T) {
	ctx := context.Background()
	for _, r := range []floodgate.Rule{
		rule(floodgate.SlidingWindow, 5, 0),
		rule(floodgate.FixedWindow, 5, 0),
		rule(floodgate.SlidingWindowCounter, 5, 0),
		rule(floodgate.TokenBucket, 5, 2),
	} {
		t.Run(r.Algorithm.String(), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(1, uint64(r.Algorithm)))
			for round := range 20 {
				now := base
				store := memstore.New(memstore.Options{Now: func() time.Time { return time.Unix(0, now) }})
				var admitted, denied []Span
				for range 200 {
					now += int64(rnd.IntN(60_000)) * int64(time.Microsecond) // whole µs, as the stores count
					res, err := store.Take(ctx, []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
					if err != nil {
						t.Fatal(err)
					}
					if res[0].Allowed {
						admitted = append(admitted, Span{now, now})
					} else {
						denied = append(denied, Span{now, now})
					}
				}
				if got := Check(r, admitted, 0); got.Over != 0 {
					t.Fatalf("round %d: what memstore admitted: %v, want 0 over", round, got)
				}
				if len(denied) == 0 {
					t.Fatalf("round %d: memstore denied nothing; the load is too light to test", round)
				}
				for _, d := range denied[:min(len(denied), 10)] {
					if got := Check(r, append(append([]Span(nil), admitted...), d), 0); got.Over != 1 {
						t.Fatalf("round %d: with the denied arrival at %d admitted: %v, want 1 over", round, d.Lo-base, got)
					}
				}
			}
		})
	}
}
