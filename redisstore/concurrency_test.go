package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/burst"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

// replicas returns n limiters, each on its own store and client with the
// same prefix, as n replicas of a service sharing one Redis.
func replicas(t *testing.T, n int) ([]*floodgate.Limiter, *Store) {
	t.Helper()
	return replicasOn(t, "redis://"+redistest.Addr(t), n)
}

// replicasOn is replicas on the Redis at url (standalone, Sentinel or
// Cluster).
func replicasOn(t *testing.T, url string, n int) ([]*floodgate.Limiter, *Store) {
	t.Helper()
	prefix := randomPrefix()
	ls := make([]*floodgate.Limiter, n)
	var first *Store
	for i := range ls {
		s, err := New(ctx(t), Options{URL: url, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if first == nil {
			first = s
		}
		// The machine may be small and the race detector slow: the budget
		// is generous so that this test measures exactness, not speed.
		if ls[i], err = floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	return ls, first
}

// TestReplicasAdmitExactlyTheLimit: 8 replicas, 1,000 concurrent requests
// on one key of limit 100 admit exactly 100, for every algorithm. The
// sliding window is a minute long; the token bucket's and fixed window's
// are a day long, so that no token refills and no window ends during a
// round.
func TestReplicasAdmitExactlyTheLimit(t *testing.T) {
	ls, _ := replicas(t, 8)
	testExactLimit(t, ls)
}

// testExactLimit is TestReplicasAdmitExactlyTheLimit on the limiters ls.
func testExactLimit(t *testing.T, ls []*floodgate.Limiter) {
	for _, alg := range algorithms {
		window := time.Minute
		if alg != floodgate.SlidingWindow {
			window = 24 * time.Hour
		}
		r := mustRule(t, "race", 100, window, alg)
		for round := range 5 {
			key := fmt.Sprintf("key-%v-%d", alg, round)
			if alg == floodgate.FixedWindow { // keep clear of midnight UTC
				d, err := ls[0].Peek(context.Background(), floodgate.Hit{Rule: r, Key: key, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				if d.ResetAfter < 10*time.Second {
					time.Sleep(d.ResetAfter + 10*time.Millisecond)
				}
			}
			var allowed atomic.Int64
			burst.Run(t, 1000, func(i int) error {
				d, err := ls[i%len(ls)].Allow(context.Background(), r, key)
				if d.Allowed {
					allowed.Add(1)
				}
				return err
			})
			if n := allowed.Load(); n != 100 {
				t.Fatalf("%v round %d: %d of 1000 allowed with limit 100 across 8 replicas", alg, round, n)
			}
		}
	}
}

// TestReplicasMultiKeyNeverExceedAnyLimit: login by IP (10) and by
// account (5), 1,000 concurrent checks over 4 IPs and one account.
func TestReplicasMultiKeyNeverExceedAnyLimit(t *testing.T) {
	ls, store := replicas(t, 8)
	testMultiKey(t, ls, store, rawClient(t))
}

// testMultiKey is TestReplicasMultiKeyNeverExceedAnyLimit on the limiters
// ls, whose keys store names; c reads what Redis holds.
func testMultiKey(t *testing.T, ls []*floodgate.Limiter, store *Store, c rueidis.Client) {
	ipRule := mustRule(t, "ip", 10, time.Minute, floodgate.SlidingWindow)
	acctRule := mustRule(t, "account", 5, time.Minute, floodgate.SlidingWindow)
	for round := range 5 {
		ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1"}
		acct := fmt.Sprintf("acct-%d", round)
		for i := range ips {
			ips[i] = fmt.Sprintf("%s-%d", ips[i], round)
		}
		var mu sync.Mutex
		perIP := map[string]int64{}
		var perAcct int64
		burst.Run(t, 1000, func(i int) error {
			ip := ips[i%len(ips)]
			d, err := ls[i%len(ls)].Check(context.Background(),
				floodgate.Hit{Rule: ipRule, Key: ip, Cost: 1}, floodgate.Hit{Rule: acctRule, Key: acct, Cost: 1})
			if d.Allowed {
				mu.Lock()
				perIP[ip]++
				perAcct++
				mu.Unlock()
			}
			return err
		})
		if perAcct != 5 {
			t.Fatalf("round %d: account admitted %d, limit 5", round, perAcct)
		}
		// Count what Redis holds: each key must hold exactly what was
		// admitted through it, and no more than its limit.
		zcard := func(rule floodgate.Rule, key string) int64 { return ringLen(t, c, stateKey(store, rule, key)) }
		if n := zcard(acctRule, acct); n != perAcct {
			t.Fatalf("round %d: account holds %d entries, %d admitted", round, n, perAcct)
		}
		for _, ip := range ips {
			n := zcard(ipRule, ip)
			if n != perIP[ip] || n > 10 {
				t.Fatalf("round %d: ip %s holds %d entries, %d admitted, limit 10", round, ip, n, perIP[ip])
			}
		}
	}
}
