package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// An Overdraw hit's cost may exceed its rule's capacity, up to bounds.Limit,
// but not a sliding-window log's bounds.SlidingCost (floodgate.Hit.Overdraw).
func TestOverdrawCostBounds(t *testing.T) {
	l := newLimiter(t)
	bucket, _ := floodgate.NewRule("bucket", 10, time.Minute, floodgate.TokenBucket)
	log := mustRule(t, "log", 10, time.Minute)
	for _, tc := range []struct {
		name   string
		hit    floodgate.Hit
		wantIn string // "" when valid
	}{
		{"above the capacity", floodgate.Hit{Rule: bucket, Key: "a", Cost: 11, Overdraw: true}, ""},
		{"bounds.Limit", floodgate.Hit{Rule: bucket, Key: "b", Cost: bounds.Limit, Overdraw: true}, ""},
		{"above bounds.Limit", floodgate.Hit{Rule: bucket, Key: "c", Cost: bounds.Limit + 1, Overdraw: true}, "of an overdraw hit is above 2251799813685248"},
		{"a log's bounds.SlidingCost", floodgate.Hit{Rule: log, Key: "d", Cost: bounds.SlidingCost, Overdraw: true}, ""},
		{"above a log's bounds.SlidingCost", floodgate.Hit{Rule: log, Key: "e", Cost: bounds.SlidingCost + 1, Overdraw: true}, "the most a sliding-window log records in one hit"},
		{"not overdraw: above the capacity", floodgate.Hit{Rule: bucket, Key: "f", Cost: 11}, "could never be allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Check(context.Background(), tc.hit)
			switch {
			case tc.wantIn == "" && err != nil:
				t.Fatalf("Check = %v; want the hit accepted", err)
			case tc.wantIn != "" && (!errors.Is(err, floodgate.ErrInvalidHit) || !strings.Contains(err.Error(), tc.wantIn)):
				t.Fatalf("Check = %v; want ErrInvalidHit mentioning %q", err, tc.wantIn)
			}
		})
	}
}

// fakeLimiter is a Limiter on a memstore whose clock the test moves.
func fakeLimiter(t *testing.T) (*floodgate.Limiter, *storetest.FakeClock) {
	t.Helper()
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Options{Now: clock.Now})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// A charge past the limit is Recorded though not Allowed, the key reports
// its debt as a negative Remaining, and a Refund of the charge undoes it.
func TestChargeIsRecordedAndRefundable(t *testing.T) {
	l, _ := fakeLimiter(t)
	ctx := context.Background()
	r, _ := floodgate.NewRule("fixed", 10, time.Hour, floodgate.FixedWindow)
	d, err := l.Check(ctx, floodgate.Hit{Rule: r, Key: "k", Cost: 15, Overdraw: true})
	if err != nil || d.Allowed || !d.Recorded || d.Remaining != -5 || d.RetryAfter <= 0 || d.Each != nil {
		t.Fatalf("Charge(15) of 10: %+v, %v; want recorded, not allowed, Remaining -5", d, err)
	}
	if p, _ := l.Peek(ctx, floodgate.Hit{Rule: r, Key: "k"}); p.Allowed || p.Recorded || p.Remaining != -5 {
		t.Fatalf("Peek in debt: %+v; want denied, Remaining -5", p)
	}
	if err := l.Refund(ctx, d); err != nil {
		t.Fatal(err)
	}
	if a, _ := l.Check(ctx, floodgate.Hit{Rule: r, Key: "k", Cost: 10}); !a.Allowed || !a.Recorded || a.Remaining != 0 {
		t.Fatalf("after refunding the charge: %+v; want the whole limit back", a)
	}
	if d, _ := l.Check(ctx, floodgate.Hit{Rule: r, Key: "other", Cost: 3, Overdraw: true}); !d.Allowed || !d.Recorded || d.Remaining != 7 {
		t.Fatalf("Charge(3) of 10: %+v; want allowed, recorded, Remaining 7", d)
	}
}

// In a check, the hits that are not Overdraw stay all-or-nothing, and an
// Overdraw hit is recorded whenever they are admitted.
func TestOverdrawInACheck(t *testing.T) {
	l, _ := fakeLimiter(t)
	ctx := context.Background()
	r, _ := floodgate.NewRule("fixed", 10, time.Hour, floodgate.FixedWindow)
	login := floodgate.Hit{Rule: mustRule(t, "login", 1, time.Hour), Key: "acct"}
	charge := floodgate.Hit{Rule: r, Key: "acct", Cost: 12, Overdraw: true}
	d, err := l.Check(ctx, login, charge)
	if err != nil || d.Allowed || !d.Recorded || d.Policy != "fixed" || d.Remaining != -2 ||
		!d.Each[0].Allowed || !d.Each[0].Recorded || d.Each[1].Allowed || !d.Each[1].Recorded {
		t.Fatalf("login within its limit, charge past its own: %+v, %v; want both recorded, the charge reported not allowed", d, err)
	}
	d, err = l.Check(ctx, login, charge)
	if err != nil || d.Allowed || d.Recorded || d.Each[0].Allowed || d.Each[1].Remaining != -2 {
		t.Fatalf("login past its limit: %+v, %v; want nothing recorded, the charge reporting the debt it found", d, err)
	}
	if p, _ := l.Peek(ctx, floodgate.Hit{Rule: r, Key: "acct"}); p.Remaining != -2 {
		t.Fatalf("after a check that recorded nothing: %+v; want the first charge's debt alone", p)
	}
	// The charge would carry the key past its bound (a debt of 10, the
	// capacity): what it had before is not what it would have less the
	// charge, and a Peek reports it as the Check does.
	if p, err := l.Peek(ctx, login, charge); err != nil || p.Each[1].Remaining != -2 || p.Each[1].Allowed {
		t.Fatalf("Peek of login past its limit and the charge: %+v, %v; want the charge reporting the debt it found, -2", p, err)
	}
	if err := l.Refund(ctx, d); err != nil { // recorded nothing: a no-op
		t.Fatal(err)
	}
	if p, _ := l.Peek(ctx, floodgate.Hit{Rule: r, Key: "acct"}); p.Remaining != -2 {
		t.Fatalf("after refunding a check that recorded nothing: %+v", p)
	}
}
