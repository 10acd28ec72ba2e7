package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestSlidingWindowMatchesModel replays random traces of requests against
// the store and against a direct model of the sliding-window log: a
// request of cost c at t is admitted iff the costs admitted in (t-W, t]
// plus c are at most L.
func TestSlidingWindowMatchesModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int64
		window  time.Duration
		maxCost int64
		maxGap  time.Duration
	}{
		{"10 per minute, cost 1", 10, time.Minute, 1, 15 * time.Second},
		{"7 per second, costs 1..3", 7, time.Second, 3, 300 * time.Millisecond},
		{"100 per 10ms, costs 1..5", 100, 10 * time.Millisecond, 5, 200 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(tc.limit)))
			l, rule, clock := modelLimiter(t, floodgate.SlidingWindow, tc.limit, tc.window)
			type admit struct {
				at   time.Time
				cost int64
			}
			var admitted []admit
			const requests = 10_000
			for i := range requests {
				// Bursts: often several requests at one instant.
				if rng.IntN(3) == 0 {
					clock.Advance(time.Duration(rng.Int64N(int64(tc.maxGap))))
				}
				now := clock.Now()
				cost := 1 + rng.Int64N(tc.maxCost)
				var inWindow int64
				for _, a := range admitted {
					if a.at.After(now.Add(-tc.window)) {
						inWindow += a.cost
					}
				}
				want := inWindow+cost <= tc.limit
				d, err := l.Check(context.Background(), floodgate.Hit{Rule: rule, Key: "k", Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != want {
					t.Fatalf("request %d (cost %d, %d in window): store allowed=%v, model allowed=%v", i, cost, inWindow, d.Allowed, want)
				}
				if d.Allowed {
					admitted = append(admitted, admit{now, cost})
				}
			}
			// No window of length W, anywhere in the trace, admits more than L.
			for i, a := range admitted {
				var sum int64
				for _, b := range admitted[i:] {
					if b.at.Sub(a.at) >= tc.window {
						break
					}
					sum += b.cost
				}
				if sum > tc.limit {
					t.Fatalf("window starting at request %d admitted %d, limit %d", i, sum, tc.limit)
				}
			}
			if len(admitted) < requests/20 {
				t.Fatalf("only %d of %d requests admitted: the trace does not exercise the limit", len(admitted), requests)
			}
		})
	}
}

// TestSlidingWindowCounterMatchesModel replays random traces against the
// store's sliding-window counter and against a direct model of it: with p
// and c the costs admitted in the previous and current epoch-aligned
// windows, a request of cost n at t into the current window is admitted
// iff p*(W-t) + (c+n)*W <= L*W. Each denial's RetryAfter is checked too:
// one nanosecond earlier the request would still be denied, at RetryAfter
// it is admitted.
func TestSlidingWindowCounterMatchesModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int64
		window  time.Duration
		maxCost int64
		maxGap  time.Duration
	}{
		{"10 per minute, cost 1", 10, time.Minute, 1, 15 * time.Second},
		{"7 per second, costs 1..3", 7, time.Second, 3, 300 * time.Millisecond},
		{"1000 per 10ms, costs 1..50", 1000, 10 * time.Millisecond, 50, 200 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(2, uint64(tc.limit)))
			l, rule, clock := modelLimiter(t, floodgate.SlidingWindowCounter, tc.limit, tc.window)
			w := int64(tc.window)
			admitted := map[int64]int64{} // window index -> cost admitted
			model := func(now time.Time, cost int64) bool {
				ns := now.UnixNano()
				idx, into := ns/w, ns%w
				return admitted[idx-1]*(w-into)+(admitted[idx]+cost)*w <= tc.limit*w
			}
			probe := floodgate.Hit{Rule: rule, Key: "k"}
			retryChecked := 0
			for i := range 5_000 {
				if rng.IntN(3) == 0 {
					clock.Advance(time.Duration(rng.Int64N(int64(tc.maxGap))))
				}
				now := clock.Now()
				cost := 1 + rng.Int64N(tc.maxCost)
				want := model(now, cost)
				d, err := l.Check(context.Background(), floodgate.Hit{Rule: rule, Key: "k", Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != want {
					t.Fatalf("request %d (cost %d): store allowed=%v, model allowed=%v", i, cost, d.Allowed, want)
				}
				if d.Allowed {
					admitted[now.UnixNano()/w] += cost
					continue
				}
				if d.RetryAfter <= 0 {
					t.Fatalf("request %d: denied with RetryAfter %v", i, d.RetryAfter)
				}
				if rng.IntN(10) == 0 { // sometimes: wait exactly RetryAfter
					probe.Cost = cost
					clock.Advance(d.RetryAfter - 1)
					if model(clock.Now(), cost) {
						t.Fatalf("request %d: RetryAfter %v is too long: the model admits it a nanosecond earlier", i, d.RetryAfter)
					}
					clock.Advance(1)
					if !model(clock.Now(), cost) {
						t.Fatalf("request %d: RetryAfter %v is too short: the model still denies it", i, d.RetryAfter)
					}
					if p, err := l.Peek(context.Background(), probe); err != nil || !p.Allowed {
						t.Fatalf("request %d: peek after RetryAfter: %+v, %v", i, p, err)
					}
					retryChecked++
				}
			}
			if retryChecked < 10 {
				t.Fatalf("only %d RetryAfters checked: the trace does not exercise the limit", retryChecked)
			}
		})
	}
}

// modelLimiter returns a Limiter on a memstore with a fake clock, and a
// rule "model" of limit per window under alg, for the model tests. The
// store is closed when the test ends.
func modelLimiter(t *testing.T, alg floodgate.Algorithm, limit int64, window time.Duration) (*floodgate.Limiter, floodgate.Rule, *storetest.FakeClock) {
	t.Helper()
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Options{Now: clock.Now})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rule, err := floodgate.NewRule("model", limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return l, rule, clock
}
