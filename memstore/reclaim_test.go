package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

const day = 24 * time.Hour

func namedRule(t *testing.T, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// takeOne takes h alone on s.
func takeOne(s *memstore.Store, h floodgate.Hit) (floodgate.Result, error) {
	res, err := s.Take(context.Background(), []floodgate.Hit{h})
	if err != nil {
		return floodgate.Result{}, err
	}
	return res[0], nil
}

// isFull reports whether err is the refusal of a full store: ErrFull,
// which a caller counts, and ErrStoreUnavailable, which makes the route's
// failure mode answer.
func isFull(err error) bool {
	return errors.Is(err, memstore.ErrFull) && errors.Is(err, floodgate.ErrStoreUnavailable)
}

// TestFullStoreReclaimsWhatNoLongerWeighs: a full store makes room for a
// new key by dropping a key whose state no longer weighs, to the
// nanosecond, whatever the algorithm says that is: a fixed window whose
// window ended, a token bucket refilled, a counter whose next window
// ended too, a log whose times all left the window. A nanosecond earlier
// the state still weighs, and the new key is refused. The keys that still
// weigh keep their counts.
func TestFullStoreReclaimsWhatNoLongerWeighs(t *testing.T) {
	for _, tc := range []struct {
		rule floodgate.Rule
		life time.Duration // from the fake clock's start, 2026-07-01T12:00Z
		want fig           // a new key's take once the old one no longer weighs
	}{
		{namedRule(t, "fixed", 5, day, floodgate.FixedWindow), 12 * time.Hour, fig{true, 4, day, 0}},                // the day's window ends at midnight
		{namedRule(t, "bucket", 24, day, floodgate.TokenBucket), time.Hour, fig{true, 23, time.Hour, 0}},            // one token an hour
		{namedRule(t, "counter", 5, day, floodgate.SlidingWindowCounter), 36 * time.Hour, fig{true, 4, 2 * day, 0}}, // the next window weighs it too
		{namedRule(t, "log", 5, day, floodgate.SlidingWindow), day, fig{true, 4, day, 0}},
	} {
		t.Run(tc.rule.Algorithm.String(), func(t *testing.T) {
			g := newRig(t, false, memstore.Tuned(memstore.Options{MaxKeys: 4}, 1, 0))
			live := namedRule(t, "live", 5, 7*day, floodgate.SlidingWindow)
			for _, k := range []string{"a", "b", "c"} {
				g.take(floodgate.Hit{Rule: live, Key: k, Cost: 1})
			}
			g.take(floodgate.Hit{Rule: tc.rule, Key: "old", Cost: 1})
			g.clock.Advance(tc.life - 1)
			if _, err := takeOne(g.s, floodgate.Hit{Rule: tc.rule, Key: "new", Cost: 1}); !isFull(err) {
				t.Fatalf("a new key a nanosecond before the old one stops weighing: %v; want ErrFull and ErrStoreUnavailable", err)
			}
			g.clock.Advance(1)
			r, err := takeOne(g.s, floodgate.Hit{Rule: tc.rule, Key: "new", Cost: 1})
			if err != nil || figOf(r) != tc.want {
				t.Fatalf("a new key once the old one no longer weighs: %+v, %v; want %+v (the old one reclaimed)", figOf(r), err, tc.want)
			}
			if n := g.s.Len(); n != 4 {
				t.Fatalf("Len %d; want 4", n)
			}
			for _, k := range []string{"a", "b", "c"} {
				g.peek("a key that still weighs, "+k, floodgate.Hit{Rule: live, Key: k, Cost: 1}, fig{true, 3, 7 * day, 0})
			}
		})
	}
}

// TestFullStoreOfLiveKeysRefuses: when every key held still weighs, a new
// key is refused with an error that is both memstore.ErrFull and
// floodgate.ErrStoreUnavailable (the route's failure mode answers), on
// the single-key path, the multi-key path and through a Limiter; the keys
// held keep deciding exactly, a Peek of a new key answers as for a fresh
// one, and once a key stops weighing a new one is admitted.
func TestFullStoreOfLiveKeysRefuses(t *testing.T) {
	g := newRig(t, false, memstore.Tuned(memstore.Options{MaxKeys: 3}, 1, 0))
	ctx := context.Background()
	rules := []floodgate.Rule{
		namedRule(t, "fixed", 3, day, floodgate.FixedWindow),
		namedRule(t, "bucket", 3, day, floodgate.TokenBucket), // a token every 8h
		namedRule(t, "log", 3, day, floodgate.SlidingWindow),
	}
	for _, r := range rules {
		g.take(floodgate.Hit{Rule: r, Key: "held", Cost: 1})
	}
	g.clock.Advance(time.Hour)
	newHit := floodgate.Hit{Rule: rules[2], Key: "new", Cost: 1}
	_, err := takeOne(g.s, newHit)
	if !isFull(err) || !strings.Contains(err.Error(), "memstore: full: 3 keys held") {
		t.Fatalf("TakeOne of a new key: %v; want ErrFull and ErrStoreUnavailable, naming the 3 keys held", err)
	}
	if _, err := g.s.Take(ctx, []floodgate.Hit{{Rule: rules[0], Key: "held", Cost: 1}, newHit}); !isFull(err) {
		t.Fatalf("Take of a held key and a new one: %v; want ErrFull and ErrStoreUnavailable", err)
	}
	l, err := floodgate.New(g.s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, rules[1], "new"); !isFull(err) {
		t.Fatalf("Limiter.Allow of a new key: %v; want ErrFull and ErrStoreUnavailable", err)
	}
	g.peek("a new key's peek", newHit, fig{true, 2, day, 0})
	// The refused multi-key Take recorded nothing on the held key.
	g.expect("fixed window", 0, floodgate.Hit{Rule: rules[0], Key: "held", Cost: 1}, fig{true, 1, 11 * time.Hour, 0})
	g.expect("token bucket", 0, floodgate.Hit{Rule: rules[1], Key: "held", Cost: 1}, fig{true, 1, 15 * time.Hour, 0}) // 9h of room at 8h a token
	g.expect("log", 0, floodgate.Hit{Rule: rules[2], Key: "held", Cost: 1}, fig{true, 1, day, 0})
	if n := g.s.Len(); n != 3 {
		t.Fatalf("Len = %d; want 3", n)
	}
	g.clock.Advance(11 * time.Hour) // midnight: the fixed window's state no longer weighs
	if _, err := takeOne(g.s, newHit); err != nil {
		t.Fatalf("a new key once a held one stopped weighing: %v", err)
	}
}

// TestFullStoreKeepsEveryHitOfATake: a multi-key Take that needs room for
// two new keys where there is room for one is refused whole; making room
// for its second key never drops the entry it just created for its first
// (which holds nothing yet), which would admit the Take and lose the
// first key's hit: that key would then be admitted past its limit.
func TestFullStoreKeepsEveryHitOfATake(t *testing.T) {
	g := newRig(t, false, memstore.Tuned(memstore.Options{MaxKeys: 2}, 1, 0))
	ctx := context.Background()
	once := namedRule(t, "once", 1, day, floodgate.FixedWindow)
	g.take(floodgate.Hit{Rule: once, Key: "held", Cost: 1})
	g.take(floodgate.Hit{Rule: namedRule(t, "brief", 1, time.Second, floodgate.SlidingWindow), Key: "old", Cost: 1})
	g.clock.Advance(time.Second) // "old" no longer weighs
	_, err := g.s.Take(ctx, []floodgate.Hit{{Rule: once, Key: "a", Cost: 1}, {Rule: once, Key: "b", Cost: 1}})
	if !isFull(err) {
		t.Fatalf("Take of two new keys with room for one: %v; want ErrFull and ErrStoreUnavailable", err)
	}
	if n := g.s.Len(); n != 1 {
		t.Fatalf("Len = %d after the refused Take; want 1, the held key", n)
	}
	left := 12*time.Hour - time.Second // to midnight
	g.expect("a's first take", 0, floodgate.Hit{Rule: once, Key: "a", Cost: 1}, fig{true, 0, left, 0})
	g.expect("a's second take", 0, floodgate.Hit{Rule: once, Key: "a", Cost: 1}, fig{false, 0, left, left})
}

// TestReclaimNeverChangesADecision replays random traces of takes (one
// key or several), peeks, refunds and resets over more keys than it holds
// on a store of 8 keys and on an unbounded one, on one fake clock, and
// compares every figure and stamp: reclaiming a key whose state no longer
// weighs must answer exactly as keeping it would. A take the small store
// refuses as full is not replayed on the other; both the refusals and the
// takes admitted at the bound must be frequent for the trace to prove
// anything.
func TestReclaimNeverChangesADecision(t *testing.T) {
	rules := []floodgate.Rule{
		namedRule(t, "log", 3, 50*time.Millisecond, floodgate.SlidingWindow),
		namedRule(t, "bucket", 4, 200*time.Millisecond, floodgate.TokenBucket),
		namedRule(t, "fixed", 3, time.Second, floodgate.FixedWindow),
		namedRule(t, "counter", 5, 300*time.Millisecond, floodgate.SlidingWindowCounter),
		namedRule(t, "daily", 2, day, floodgate.FixedWindow),
		namedRule(t, "hourly", 2, time.Hour, floodgate.TokenBucket),
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 25))
			clock := storetest.NewFakeClock()
			const held = 8
			small := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now, MaxKeys: held}, 1, time.Hour))
			large := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now, MaxKeys: -1}, 1, time.Hour))
			defer small.Close()
			defer large.Close()
			ctx := context.Background()
			hit := func() floodgate.Hit {
				r, keys := rules[rng.IntN(4)], 12 // the short windows mostly
				if rng.IntN(8) == 0 {
					// The long ones on 3 keys: at most 6 of the 8 held
					// weigh for hours, the others come and go.
					r, keys = rules[4+rng.IntN(2)], 3
				}
				return floodgate.Hit{Rule: r, Key: fmt.Sprint("k", rng.IntN(keys)), Cost: 1 + rng.Int64N(min(2, r.Capacity()))}
			}
			hits := func() []floodgate.Hit { // one to three, each (rule, key) once
				var hs []floodgate.Hit
				seen := map[string]bool{}
				for n := 1 + rng.IntN(3); len(hs) < n; {
					h := hit()
					if id := h.Rule.Name + ":" + h.Key; !seen[id] {
						seen[id] = true
						hs = append(hs, h)
					}
				}
				return hs
			}
			same := func(step int, what string, a, b []floodgate.Result) {
				t.Helper()
				for i := range a {
					if figOf(a[i]) != figOf(b[i]) || !a[i].Stamp.At.Equal(b[i].Stamp.At) || a[i].Stamp.Take != b[i].Stamp.Take {
						t.Fatalf("step %d, %s, hit %d: the bounded store answered %+v, stamp %+v; the unbounded one %+v, stamp %+v",
							step, what, i, figOf(a[i]), a[i].Stamp, figOf(b[i]), b[i].Stamp)
					}
				}
			}
			type taken struct {
				hits         []floodgate.Hit
				small, large []floodgate.Result
			}
			var past []taken
			receipts := func(hs []floodgate.Hit, rs []floodgate.Result) []floodgate.Receipt {
				out := make([]floodgate.Receipt, len(hs))
				for i := range hs {
					out[i] = floodgate.Receipt{Hit: hs[i], Stamp: rs[i].Stamp}
				}
				return out
			}
			refused, atBound := 0, 0
			for step := range 6_000 {
				switch rng.IntN(40) {
				case 0:
					clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Hour))))
				case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12:
					clock.Advance(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
				}
				switch op := rng.IntN(20); {
				case op < 12: // a take
					hs := hits()
					full := small.Len() == held
					rs, err := small.Take(ctx, hs)
					if err != nil {
						if !isFull(err) {
							t.Fatalf("step %d: the bounded store failed with %v", step, err)
						}
						refused++
						continue
					}
					if full {
						atBound++
					}
					rl, err := large.Take(ctx, hs)
					if err != nil {
						t.Fatal(err)
					}
					same(step, "take", rs, rl)
					past = append(past, taken{hs, rs, rl})
				case op < 15: // a peek
					hs := hits()
					rs, err1 := small.Peek(ctx, hs)
					rl, err2 := large.Peek(ctx, hs)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					same(step, "peek", rs, rl)
				case op < 19 && len(past) > 0: // a refund, of a recent take mostly
					p := past[max(0, len(past)-1-rng.IntN(min(len(past), 20)))]
					if err := small.Refund(ctx, receipts(p.hits, p.small)); err != nil {
						t.Fatal(err)
					}
					if err := large.Refund(ctx, receipts(p.hits, p.large)); err != nil {
						t.Fatal(err)
					}
				default: // a reset
					h := hit()
					if err := small.Reset(ctx, h.Rule, h.Key); err != nil {
						t.Fatal(err)
					}
					if err := large.Reset(ctx, h.Rule, h.Key); err != nil {
						t.Fatal(err)
					}
				}
				if n := small.Len(); n > held {
					t.Fatalf("step %d: the bounded store holds %d keys; want at most %d", step, n, held)
				}
			}
			if refused < 100 || atBound < 100 {
				t.Fatalf("%d takes refused, %d admitted at the bound; want at least 100 of each for the trace to test reclaiming", refused, atBound)
			}
			t.Logf("%d takes refused, %d admitted at the bound", refused, atBound)
		})
	}
}
