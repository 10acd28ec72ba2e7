package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
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

// A settled overrun is seen by the next request of every replica: three
// Limiters, each on a Store of its own (its own connections, as three
// processes would have) sharing one Redis and prefix. One settles an
// estimate of 50 as 120 under a limit of 100: every replica then peeks
// the same debt of 30 and denies, and a refund of the charge on one
// replica is seen by the others.
func TestSettledOverrunReachesEveryReplica(t *testing.T) {
	ctx := context.Background()
	prefix := randomPrefix()
	var replicas [3]*floodgate.Limiter
	for i := range replicas {
		s, err := New(ctx, Options{URL: "redis://" + redistest.Addr(t), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if replicas[i], err = floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.TokenBucket} {
		rule := floodgate.Rule{Name: "tokens", Limit: 100, Window: time.Hour, Algorithm: alg}
		key := "acct-" + alg.String()
		d, err := replicas[0].Check(ctx, floodgate.Hit{Rule: rule, Key: key, Cost: 50})
		if err != nil || !d.Allowed || d.Remaining != 50 {
			t.Fatalf("%v: estimate 50: %+v, %v", alg, d, err)
		}
		c, err := replicas[0].Settle(ctx, d, 120)
		if err != nil || !c.Recorded || c.Allowed || c.Remaining != -20 {
			t.Fatalf("%v: settling 50 as 120: %+v, %v; want recorded past the limit, Remaining -20", alg, c, err)
		}
		for i, l := range replicas {
			p, err := l.Peek(ctx, floodgate.Hit{Rule: rule, Key: key})
			if err != nil || p.Allowed || p.Remaining != -20 || p.RetryAfter <= 0 {
				t.Errorf("%v: replica %d peeks %+v, %v; want denied, Remaining -20, a RetryAfter", alg, i, p, err)
			}
			if d, err := l.Allow(ctx, rule, key); err != nil || d.Allowed || d.Recorded {
				t.Errorf("%v: replica %d's next request: %+v, %v; want denied, nothing recorded", alg, i, d, err)
			}
		}
		if err := replicas[0].Refund(ctx, c); err != nil {
			t.Fatal(err)
		}
		for i, l := range replicas {
			if p, err := l.Peek(ctx, floodgate.Hit{Rule: rule, Key: key}); err != nil || !p.Allowed || p.Remaining != 49 {
				t.Errorf("%v: replica %d after the charge's refund: %+v, %v; want allowed, 49 left after the peek's one", alg, i, p, err)
			}
		}
	}
}
