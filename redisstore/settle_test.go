package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Settle on real Redis: an underrun is refunded, an overrun charged past
// the limit, with exact figures (a fixed window of an hour: nothing rolls
// over between the steps).
func TestSettleOnRedis(t *testing.T) {
	ctx := context.Background()
	l, err := floodgate.New(newStore(t), floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rule := floodgate.Rule{Name: "settle", Limit: 100, Window: time.Hour, Algorithm: floodgate.FixedWindow}
	key := "settle-" + t.Name()
	d, err := l.Check(ctx, floodgate.Hit{Rule: rule, Key: key, Cost: 30})
	if err != nil || d.Remaining != 70 {
		t.Fatalf("estimate 30: %+v, %v", d, err)
	}
	if _, err := l.Settle(ctx, d, 10); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, floodgate.Hit{Rule: rule, Key: key}); err != nil || p.Remaining != 89 {
		t.Fatalf("after settling 30 as 10: %+v, %v; want 89 left after the peek's one", p, err)
	}
	d, err = l.Check(ctx, floodgate.Hit{Rule: rule, Key: key, Cost: 50})
	if err != nil || d.Remaining != 40 {
		t.Fatalf("estimate 50: %+v, %v", d, err)
	}
	c, err := l.Settle(ctx, d, 120)
	if err != nil || !c.Recorded || c.Allowed || c.Remaining != -30 {
		t.Fatalf("settling 50 as 120: %+v, %v; want recorded past the limit, Remaining -30", c, err)
	}
	if d, err := l.Allow(ctx, rule, key); err != nil || d.Allowed {
		t.Fatalf("a request of a key in debt: %+v, %v; want denied", d, err)
	}
}
