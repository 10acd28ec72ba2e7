package floodgate_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestConcurrencyRuleAndHits(t *testing.T) {
	var a floodgate.Algorithm
	if err := a.UnmarshalText([]byte("concurrency")); err != nil || a != floodgate.Concurrency || a.String() != "concurrency" {
		t.Fatalf("UnmarshalText(concurrency) = %v, %v", a, err)
	}
	r, err := floodgate.NewRule("inflight", 3, time.Minute, floodgate.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		hit  floodgate.Hit
	}{
		{"overdraw", floodgate.Hit{Rule: r, Key: "k", Overdraw: true}},
		{"cost past the limit", floodgate.Hit{Rule: r, Key: "k", Cost: 4}},
	} {
		if _, err := l.Check(ctx, tc.hit); !errors.Is(err, floodgate.ErrInvalidHit) {
			t.Errorf("%s: Check = %v; want ErrInvalidHit", tc.name, err)
		}
	}
	held, err := l.Check(ctx, floodgate.Hit{Rule: r, Key: "k"})
	if err != nil || !held.Allowed {
		t.Fatalf("a lease: %+v, %v", held, err)
	}
	if _, err := l.Settle(ctx, held, 2); !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Errorf("Settle of a lease past its cost = %v; want ErrInvalidHit: a lease is within its limit or not taken", err)
	}
}

// Renew returns a decision that holds no lease as it is: a denial, a
// rate's hit, a Peek.
func TestRenewWithoutLeases(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	rate := mustRule(t, "rate", 1, time.Minute)
	conc, err := floodgate.NewRule("inflight", 1, time.Minute, floodgate.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	allowed, _ := l.Allow(ctx, rate, "k")
	denied, _ := l.Allow(ctx, rate, "k")
	held, _ := l.Allow(ctx, conc, "k")
	refused, _ := l.Allow(ctx, conc, "k")
	for name, d := range map[string]floodgate.Decision{"a rate's hit": allowed, "a rate's denial": denied, "a lease's denial": refused} {
		got, err := l.Renew(ctx, d)
		if err != nil || got.Allowed != d.Allowed || got.Remaining != d.Remaining || got.RetryAfter != d.RetryAfter {
			t.Errorf("Renew of %s: got %+v, %v; want it as it was, %+v", name, got, err, d)
		}
	}
	if !held.Allowed || refused.Allowed {
		t.Fatalf("leases: got %+v and %+v", held, refused)
	}
	// The rate's hit is still recorded: Renew refunded nothing.
	if d, _ := l.Allow(ctx, rate, "k"); d.Allowed {
		t.Fatalf("the rate after Renew: got %+v", d)
	}
}

// A denial by a concurrency limit is never cached: a slot frees when its
// holder releases it, on this replica or another, at no time the store
// can tell.
func TestDenialCacheSkipsLeases(t *testing.T) {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	replica := func() *floodgate.Limiter {
		l, err := floodgate.New(s, floodgate.Options{DenialCacheSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := replica(), replica()
	ctx := context.Background()
	conc, err := floodgate.NewRule("inflight", 1, time.Hour, floodgate.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := b.Allow(ctx, conc, "k")
	if d, _ := a.Allow(ctx, conc, "k"); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("while held elsewhere: got %+v", d)
	}
	if err := b.Refund(ctx, held); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Allow(ctx, conc, "k"); !d.Allowed {
		t.Fatalf("after the other replica released the lease: got %+v; a concurrency denial must not be cached", d)
	}
}

// overrideTo gives every key the rule r, under the base rule's name.
type overrideTo floodgate.Rule

func (o overrideTo) Override(base floodgate.Rule, _ string) (floodgate.Rule, bool) {
	return floodgate.Rule(o), true
}

// An override never turns a rate into a lease, which nothing would
// release, nor a lease into a rate: the rule's own limit applies.
func TestOverrideKeepsLeasesApart(t *testing.T) {
	rate := mustRule(t, "api", 1, time.Minute)
	conc, err := floodgate.NewRule("api", 1, time.Minute, floodgate.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		base, over floodgate.Rule
	}{{"rate to lease", rate, conc}, {"lease to rate", conc, rate}} {
		s := memstore.New(memstore.Options{})
		defer s.Close()
		l, err := floodgate.New(s, floodgate.Options{Overrides: overrideTo(tc.over), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := l.InForce(floodgate.Hit{Rule: tc.base, Key: "k"})
		if err != nil || h.Rule != tc.base {
			t.Errorf("%s: the rule in force is %v, %v; want %v", tc.name, h.Rule, err, tc.base)
		}
	}
}
