package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// Settle charges an overrun past the limit and refunds an underrun, with
// exact figures, on every algorithm of a cost-counting rule; a denied
// decision settles nothing and a multi-hit one is refused.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.TokenBucket, floodgate.SlidingWindowCounter, floodgate.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			s := memstore.New(memstore.Options{Now: storetest.NewFakeClock().Now}) // no refill between the steps
			defer s.Close()
			l, err := floodgate.New(s, floodgate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rule := mustAlgRule(t, "tokens", 100, time.Minute, alg)
			// An estimate of 30 that turns out 10: 20 back.
			d, err := l.Check(ctx, floodgate.Hit{Rule: rule, Key: "u", Cost: 30})
			if err != nil || !d.Allowed || d.Remaining != 70 {
				t.Fatalf("estimate 30: %+v, %v", d, err)
			}
			if _, err := l.Settle(ctx, d, 10); err != nil {
				t.Fatal(err)
			}
			if p := peek(t, l, rule, "u"); p.Remaining != 89 { // 100 - 10, and the peek's own 1
				t.Fatalf("after settling 30 as 10: Remaining %d, want 89", p.Remaining)
			}
			// An estimate of 50 that turns out 120: 70 more, past the
			// limit (10 + 120 = 130 of 100): the key owes 30.
			d, err = l.Check(ctx, floodgate.Hit{Rule: rule, Key: "u", Cost: 50})
			if err != nil || !d.Allowed || d.Remaining != 40 {
				t.Fatalf("estimate 50: %+v, %v", d, err)
			}
			c, err := l.Settle(ctx, d, 120)
			if err != nil || !c.Recorded || c.Allowed || c.Remaining != -30 {
				t.Fatalf("settling 50 as 120: %+v, %v; want recorded past the limit, Remaining -30", c, err)
			}
			if d, _ := l.Allow(ctx, rule, "u"); d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("a request of a key in debt: %+v; want denied until the debt is worked off", d)
			}
		})
	}
	s := memstore.New(memstore.Options{})
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	rule := mustAlgRule(t, "one", 1, time.Minute, floodgate.FixedWindow)
	l.Allow(ctx, rule, "k")
	denied, _ := l.Check(ctx, floodgate.Hit{Rule: rule, Key: "k", Cost: 1})
	if c, err := l.Settle(ctx, denied, 5); err != nil || c.Recorded {
		t.Errorf("settling a denial: %+v, %v; want nothing charged", c, err)
	}
	multi, err := l.Check(ctx, floodgate.Hit{Rule: mustAlgRule(t, "a", 10, time.Minute, floodgate.FixedWindow), Key: "k"},
		floodgate.Hit{Rule: mustAlgRule(t, "b", 10, time.Minute, floodgate.FixedWindow), Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, multi, 3); !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Errorf("settling a check of two hits: %v; want ErrInvalidHit", err)
	}
	if _, err := l.Settle(ctx, multi.Each[0], 3); err != nil {
		t.Errorf("settling one element of Each: %v", err)
	}
}

func mustAlgRule(t *testing.T, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func peek(t *testing.T, l *floodgate.Limiter, rule floodgate.Rule, key string) floodgate.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), floodgate.Hit{Rule: rule, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An LLM proxy with a per-user budget of 10,000 tokens an hour: the
// request takes its estimate from the prompt, the response settles the
// tokens it used.
func ExampleLimiter_Settle() {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	budget := floodgate.Rule{Name: "llm-tokens", Limit: 10_000, Window: time.Hour, Algorithm: floodgate.TokenBucket}

	prompt := 1_200                 // tokens in the prompt
	estimate := int64(prompt + 800) // and a guess at the completion
	d, err := limiter.Check(ctx, floodgate.Hit{Rule: budget, Key: "user-42", Cost: estimate})
	if err != nil || !d.Allowed {
		fmt.Println("429: retry after", d.RetryAfter)
		return
	}
	used := int64(2_900) // the response's usage: prompt and completion
	settled, err := limiter.Settle(ctx, d, used)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("estimated", estimate, "used", used, "left", settled.Remaining)
	// Output: estimated 2000 used 2900 left 7100
}
