package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestRefundAndResetMatchModel replays random mixes of single and
// two-key checks, refunds (of whole decisions and of one hit of a two-key
// check, some repeated, some after a Reset) and Resets against the store
// and against direct models of the sliding-window log and the
// sliding-window counter, and compares every hit's figures: Allowed,
// Remaining, and for the log its RetryAfter and ResetAfter.
func TestRefundAndResetMatchModel(t *testing.T) {
	for _, tc := range []struct {
		alg     floodgate.Algorithm
		limit   int64
		window  time.Duration
		maxCost int64
		maxGap  time.Duration
	}{
		{floodgate.SlidingWindow, 5, time.Second, 2, 150 * time.Millisecond},
		{floodgate.SlidingWindow, 20, time.Minute, 4, 3 * time.Second},
		{floodgate.SlidingWindowCounter, 5, time.Second, 2, 150 * time.Millisecond},
		{floodgate.SlidingWindowCounter, 20, time.Minute, 4, 3 * time.Second},
		{floodgate.FixedWindow, 5, time.Second, 2, 150 * time.Millisecond},
		{floodgate.FixedWindow, 20, time.Minute, 4, 3 * time.Second},
		{floodgate.TokenBucket, 5, time.Second, 2, 150 * time.Millisecond},
		{floodgate.TokenBucket, 20, time.Minute, 4, 3 * time.Second},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(3, uint64(tc.limit)))
			l, rule, clock := modelLimiter(t, tc.alg, tc.limit, tc.window)
			m := newModel(tc.alg, tc.limit, tc.window)
			type taken struct {
				d    floodgate.Decision
				keys []string
				cost []int64
				id   int
			}
			var past []taken
			ctx := context.Background()
			stats := map[string]int{}
			for i := range 4_000 {
				if rng.IntN(3) == 0 {
					clock.Advance(time.Duration(rng.Int64N(int64(tc.maxGap))))
				}
				now := clock.Now().UnixNano()
				switch op := rng.IntN(20); {
				case op == 0: // Reset
					k := []string{"a", "b"}[rng.IntN(2)]
					if err := l.Reset(ctx, rule, k); err != nil {
						t.Fatal(err)
					}
					m.reset(k)
					stats["reset"]++
				case op < 5 && len(past) > 0: // Refund, of the whole or of one hit
					p := past[rng.IntN(len(past))]
					d, keys, cost := p.d, p.keys, p.cost
					if len(keys) == 2 && rng.IntN(2) == 0 {
						j := rng.IntN(2)
						d, keys, cost = p.d.Each[j], keys[j:j+1], cost[j:j+1]
					}
					if err := l.Refund(ctx, d); err != nil {
						t.Fatal(err)
					}
					for j, k := range keys {
						m.refund(now, p.id, k, cost[j])
					}
					stats["refund"]++
				default: // a check of one key or both
					keys := []string{"a", "b"}[:1+rng.IntN(2)]
					if len(keys) == 1 && rng.IntN(2) == 0 {
						keys = []string{"b"}
					}
					hits := make([]floodgate.Hit, len(keys))
					cost := make([]int64, len(keys))
					for j, k := range keys {
						cost[j] = 1 + rng.Int64N(tc.maxCost)
						hits[j] = floodgate.Hit{Rule: rule, Key: k, Cost: cost[j]}
					}
					d, err := l.Check(ctx, hits...)
					if err != nil {
						t.Fatal(err)
					}
					want := m.take(now, i, keys, cost)
					each := d.Each
					if len(hits) == 1 {
						each = []floodgate.Decision{d}
					}
					for j, w := range want {
						g := each[j]
						got := outcome{g.Allowed, g.Remaining, g.RetryAfter, g.ResetAfter}
						if tc.alg == floodgate.SlidingWindowCounter {
							got.retry, got.reset = 0, 0 // the counter's durations: TestSlidingWindowCounterMatchesModel
						}
						if got != w {
							t.Fatalf("op %d, check of %v (costs %v), hit %d: store %+v, model %+v", i, keys, cost, j, got, w)
						}
					}
					if d.Allowed {
						past = append(past, taken{d, keys, cost, i})
						stats["allowed"]++
					} else {
						stats["denied"]++
					}
				}
			}
			if stats["allowed"] < 200 || stats["denied"] < 200 || stats["refund"] < 200 || stats["reset"] < 50 {
				t.Fatalf("the trace does not exercise every operation: %v", stats)
			}
		})
	}
}

// outcome is what the models predict of one hit.
type outcome struct {
	allowed      bool
	remaining    int64
	retry, reset time.Duration
}

// model is a direct, unoptimized statement of each algorithm over keys
// "a" and "b", with Refund and Reset as floodgate.Store.Refund defines
// them: a refund credits only a take still held by the key's state since
// its last Reset, once, and for a token bucket no more than the take's
// cost less its age.
type model struct {
	alg     floodgate.Algorithm
	limit   int64
	window  int64
	log     map[string][]entry         // sliding window: admitted units
	counts  map[string]map[int64]int64 // counter: window index -> admitted cost
	takes   map[string]map[int]int64   // counter, fixed window: take id -> its window index; token bucket: its time
	refunds map[string]map[int]bool    // refunds done, per key, since its Reset
	tat     map[string]int64           // token bucket: the theoretical arrival time
}

type entry struct {
	at int64
	id int
}

func newModel(alg floodgate.Algorithm, limit int64, window time.Duration) *model {
	m := &model{alg: alg, limit: limit, window: int64(window)}
	m.reset("a")
	m.reset("b")
	return m
}

func (m *model) reset(k string) {
	if m.log == nil {
		m.log, m.counts, m.takes, m.refunds = map[string][]entry{}, map[string]map[int64]int64{}, map[string]map[int]int64{}, map[string]map[int]bool{}
		m.tat = map[string]int64{}
	}
	m.tat[k] = 0
	m.log[k] = nil
	m.counts[k] = map[int64]int64{}
	m.takes[k] = map[int]int64{}
	m.refunds[k] = map[int]bool{}
}

// check answers one hit at now without recording it.
func (m *model) check(now int64, k string, cost int64) outcome {
	if m.alg == floodgate.SlidingWindow {
		var live []entry
		for _, e := range m.log[k] {
			if e.at > now-m.window {
				live = append(live, e)
			}
		}
		n := int64(len(live))
		if n+cost <= m.limit {
			return outcome{true, m.limit - n - cost, 0, time.Duration(m.window)}
		}
		return outcome{false, max(0, m.limit-n), time.Duration(live[n+cost-m.limit-1].at + m.window - now), time.Duration(live[n-1].at + m.window - now)}
	}
	idx, into := now/m.window, now%m.window
	switch m.alg {
	case floodgate.FixedWindow:
		cur, left := m.counts[k][idx], time.Duration((idx+1)*m.window-now)
		if cur+cost <= m.limit {
			return outcome{true, m.limit - cur - cost, 0, left}
		}
		return outcome{false, max(0, m.limit-cur), left, left}
	case floodgate.TokenBucket:
		t := m.interval()
		tat := max(m.tat[k], now)
		next, full := tat+cost*t, m.limit*t
		if next-now <= full {
			return outcome{true, (full - (next - now)) / t, 0, time.Duration(next - now)}
		}
		return outcome{false, max(0, (full-(tat-now))/t), time.Duration(next - now - full), time.Duration(tat - now)}
	}
	prev, cur := m.counts[k][idx-1], m.counts[k][idx]
	w := (prev*(m.window-into) + m.window - 1) / m.window
	if w+cur+cost <= m.limit {
		return outcome{allowed: true, remaining: m.limit - w - cur - cost}
	}
	return outcome{remaining: max(0, m.limit-w-cur)}
}

// take checks keys with their costs, all-or-nothing, as the take id.
func (m *model) take(now int64, id int, keys []string, costs []int64) []outcome {
	out := make([]outcome, len(keys))
	all := true
	for j, k := range keys {
		out[j] = m.check(now, k, costs[j])
		all = all && out[j].allowed
	}
	if !all {
		for j := range out {
			if out[j].allowed { // nothing was recorded
				out[j].remaining += costs[j]
			}
		}
		return out
	}
	for j, k := range keys {
		if m.alg == floodgate.SlidingWindow {
			for range costs[j] {
				m.log[k] = append(m.log[k], entry{now, id})
			}
			continue
		}
		if m.alg == floodgate.TokenBucket {
			m.tat[k] = max(m.tat[k], now) + costs[j]*m.interval()
			m.takes[k][id] = now
			continue
		}
		m.counts[k][now/m.window] += costs[j]
		m.takes[k][id] = now / m.window
	}
	return out
}

// interval is a token bucket's emission interval: the window over the
// limit, rounded up to a whole microsecond, in nanoseconds.
func (m *model) interval() int64 {
	us := m.window / int64(time.Microsecond)
	return (us + m.limit - 1) / m.limit * int64(time.Microsecond)
}

// refund undoes take id's hit on k, of cost, if the key still holds it.
func (m *model) refund(now int64, id int, k string, cost int64) {
	if m.alg == floodgate.SlidingWindow {
		kept := m.log[k][:0]
		for _, e := range m.log[k] {
			if e.id != id {
				kept = append(kept, e)
			}
		}
		m.log[k] = kept
		return
	}
	if m.alg == floodgate.TokenBucket {
		at, held := m.takes[k][id]
		credit := cost*m.interval() - (now - at)
		if !held || m.refunds[k][id] || credit <= 0 {
			return // reset since, refunded already, or paid by time
		}
		m.refunds[k][id] = true
		m.tat[k] = max(now, m.tat[k]-credit)
		return
	}
	idx, held := m.takes[k][id]
	if !held || m.refunds[k][id] || idx != now/m.window {
		return // reset since, refunded already, or its window is over
	}
	m.refunds[k][id] = true
	m.counts[k][idx] = max(0, m.counts[k][idx]-cost)
}
