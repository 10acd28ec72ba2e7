package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/rueidis"
)

func TestKeySlot(t *testing.T) {
	// Vectors from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"123456789":             12739,
		"somekey":               11058,
		"foo{hash_tag}":         2515,
		"{user1000}.following":  keySlot("user1000"),
		"fg:{login:alice}:s":    keySlot("login:alice"),
		"foo{}{bar}":            keySlot("foo{}{bar}"), // an empty tag does not count
		"fg:{login:~abc}:r:t:x": keySlot("login:~abc"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// newStoreURL returns a store on the Redis at url with a random prefix,
// closed when t ends.
func newStoreURL(t testing.TB, url string) *Store {
	t.Helper()
	s, err := New(ctx(t), Options{URL: url, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clusterClient returns a plain rueidis client on cluster, to look at what
// the store wrote.
func clusterClient(t testing.TB, cluster *redistest.Cluster) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestCluster runs the store on a Redis Cluster of 3 masters and 3
// replicas: the conformance suite, the concurrency proofs of 8 replicas,
// and checks whose keys live in different slots.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 1)
	raw := clusterClient(t, cluster)

	t.Run("Routing", func(t *testing.T) {
		s := newStoreURL(t, cluster.URL())
		if !s.conn.Cluster() {
			t.Fatal("the store does not see a Cluster")
		}
		for _, key := range []string{"somekey", "foo{hash_tag}", s.tag("login", "{x}") + "s:1m0s", s.tag("ip", "192.0.2.1") + "s:1m0s"} {
			got, err := cluster.KeySlot(key)
			if err != nil || got != int(keySlot(key)) {
				t.Errorf("CLUSTER KEYSLOT %q = %d, %v; keySlot says %d", key, got, err, keySlot(key))
			}
		}
	})

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) floodgate.Store { return newStoreURL(t, cluster.URL()) })
	})

	t.Run("CrossSlot", func(t *testing.T) {
		testCrossSlot(t, func(t *testing.T) *Store { return newStoreURL(t, cluster.URL()) }, raw)
	})

	t.Run("ReplicasAdmitExactlyTheLimit", func(t *testing.T) {
		ls, _ := replicasOn(t, cluster.URL(), 8)
		testExactLimit(t, ls)
	})

	t.Run("ReplicasMultiKeyNeverExceedAnyLimit", func(t *testing.T) {
		ls, store := replicasOn(t, cluster.URL(), 8)
		// The IP keys and the account key of testMultiKey must hash to
		// different slots, or this would prove nothing new.
		cross := 0
		for round := range 5 {
			acct := keySlot(store.tag("account", fmt.Sprintf("acct-%d", round)))
			for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1"} {
				if keySlot(store.tag("ip", fmt.Sprintf("%s-%d", ip, round))) != acct {
					cross++
				}
			}
		}
		if cross < 15 {
			t.Fatalf("only %d of 20 (ip, account) pairs span two slots", cross)
		}
		testMultiKey(t, ls, store, raw)
	})

	t.Run("RollbackWhenASlotFails", func(t *testing.T) {
		testRollbackWhenASlotFails(t, cluster, raw)
	})
}

// slotState reads what the store holds for key under rule: a sliding
// window's entries, a token bucket's TAT or a fixed window's count, "" when
// the key does not exist.
// rolledBack reports whether a key's state after a rolled-back check,
// after, is its state before (read at readAt). A token bucket's may be a
// little later: a refund credits cost*T less the take's age (it cannot
// tell what time has paid of the take), so each roll-back keeps at most
// its take's age, all told at most the time since readAt. Redis runs on
// this machine's clock.
func rolledBack(t *testing.T, alg floodgate.Algorithm, before, after string, readAt time.Time) bool {
	t.Helper()
	if alg != floodgate.TokenBucket || before == after {
		return before == after
	}
	now := time.Now().UnixMicro()
	eff := func(s string) int64 { // the TAT, not before now
		if s == "" {
			return now
		}
		tat, _, _ := strings.Cut(s, ":") // "<TAT>:<epoch>"
		v, err := strconv.ParseInt(tat, 10, 64)
		if err != nil {
			t.Fatalf("token bucket state %q: %v", s, err)
		}
		return max(v, now)
	}
	b, a := eff(before), eff(after)
	return b <= a && a <= b+time.Since(readAt).Microseconds()+2000
}

func slotState(t *testing.T, c rueidis.Client, s *Store, rule floodgate.Rule, key string) string {
	t.Helper()
	k := stateKey(s, rule, key)
	if rule.Algorithm == floodgate.SlidingWindow {
		n := ringLen(t, c, k)
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	v, err := c.Do(ctx(t), c.B().Get().Key(k).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// testCrossSlot checks the reserve-and-roll-back path: an IP key and an
// account key in two slots, for each algorithm.
func testCrossSlot(t *testing.T, newStore func(*testing.T) *Store, raw rueidis.Client) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ipRule := mustRule(t, "ip", 3, time.Hour, alg)
			acctRule := mustRule(t, "account", 1, time.Hour, alg)
			ip := floodgate.Hit{Rule: ipRule, Key: "192.0.2.1", Cost: 1}
			acct := floodgate.Hit{Rule: acctRule, Key: "alice", Cost: 1}
			ipSlot, acctSlot := keySlot(s.tag("ip", ip.Key)), keySlot(s.tag("account", acct.Key))
			if ipSlot == acctSlot {
				t.Fatal("test keys share a slot; pick others")
			}
			hits := []floodgate.Hit{ip, acct}

			// Allowed: both slots record, and a peek sees both.
			res, err := s.Take(ctx(t), hits)
			if err != nil || !res[0].Allowed || !res[1].Allowed || res[0].Remaining != 2 || res[1].Remaining != 0 {
				t.Fatalf("first take: %+v, %v; want both allowed, remaining 2 and 0", res, err)
			}
			res1 := res
			if slotState(t, raw, s, ipRule, ip.Key) == "" || slotState(t, raw, s, acctRule, acct.Key) == "" {
				t.Fatal("an allowed cross-slot take must record in both slots")
			}
			ipBefore := slotState(t, raw, s, ipRule, ip.Key)
			readAt := time.Now()

			// Denied by the account: whichever slot comes first, the IP
			// must hold nothing of this take afterwards.
			for range 3 {
				res, err = s.Take(ctx(t), hits)
				if err != nil || !res[0].Allowed || res[1].Allowed || res[1].RetryAfter <= 0 {
					t.Fatalf("take past the account's limit: %+v, %v; want ip within its limit, account denied", res, err)
				}
				if got := slotState(t, raw, s, ipRule, ip.Key); !rolledBack(t, alg, ipBefore, got, readAt) {
					t.Fatalf("ip state %q after a denied check, %q before; a denied cross-slot check must roll back every slot it reserved", got, ipBefore)
				}
			}
			peek, err := s.Peek(ctx(t), hits)
			if err != nil || !peek[0].Allowed || peek[0].Remaining != 1 || peek[1].Allowed {
				t.Fatalf("peek: %+v, %v; want ip allowed with 1 remaining after it, account denied", peek, err)
			}

			// Refund across slots frees both.
			if err := s.Refund(ctx(t), receipts(hits, res1)); err != nil {
				t.Fatal(err)
			}
			if err := s.Refund(ctx(t), receipts(hits, res1)); err != nil { // idempotent
				t.Fatal(err)
			}
			peek, err = s.Peek(ctx(t), hits)
			// A token bucket's refunds credit each take's cost less its
			// age (floodgate.Store.Refund): the roll-backs above and this
			// refund leave at most the time since readAt of debt, which
			// costs the peek one token of the ip's three.
			free := peek[0].Remaining == 2 ||
				alg == floodgate.TokenBucket && peek[0].Remaining == 1 && peek[0].ResetAfter-20*time.Minute <= time.Since(readAt)
			if err != nil || !peek[0].Allowed || !free || !peek[1].Allowed {
				t.Fatalf("peek after refund: %+v, %v; want both free", peek, err)
			}

			// Three slots, the middle one denies.
			third := floodgate.Hit{Rule: mustRule(t, "device", 5, time.Hour, alg), Key: "device-1", Cost: 1}
			for i := 0; keySlot(s.tag("device", third.Key)) == ipSlot || keySlot(s.tag("device", third.Key)) == acctSlot; i++ {
				third.Key = "device-" + strconv.Itoa(i)
			}
			if _, err := s.Take(ctx(t), []floodgate.Hit{acct}); err != nil {
				t.Fatal(err)
			}
			before := []string{slotState(t, raw, s, ipRule, ip.Key), slotState(t, raw, s, third.Rule, third.Key)}
			readAt = time.Now()
			res, err = s.Take(ctx(t), []floodgate.Hit{third, ip, acct})
			if err != nil || res[2].Allowed || !res[0].Allowed || !res[1].Allowed {
				t.Fatalf("three-slot take: %+v, %v", res, err)
			}
			after := []string{slotState(t, raw, s, ipRule, ip.Key), slotState(t, raw, s, third.Rule, third.Key)}
			if !rolledBack(t, alg, before[0], after[0], readAt) || !rolledBack(t, alg, before[1], after[1], readAt) {
				t.Fatalf("states %q before, %q after a denied three-slot check", before, after)
			}
		})
	}
}

// testRollbackWhenASlotFails freezes the master of a check's second slot,
// so that the check fails after its first slot recorded: the first slot
// must be rolled back (in the background, once the check's budget is
// spent), and the store must say the check failed.
func testRollbackWhenASlotFails(t *testing.T, cluster *redistest.Cluster, raw rueidis.Client) {
	s := newStoreURL(t, cluster.URL())
	rule := mustRule(t, "frozen", 10, time.Hour, floodgate.SlidingWindow)
	// Two keys in two slots on two masters, the first slot lower.
	var first, second floodgate.Hit
	var frozen *redistest.Server
	for i := 0; frozen == nil; i++ {
		a := floodgate.Hit{Rule: rule, Key: "a-" + strconv.Itoa(i), Cost: 1}
		b := floodgate.Hit{Rule: rule, Key: "b-" + strconv.Itoa(i), Cost: 1}
		sa, sb := keySlot(s.tag(rule.Name, a.Key)), keySlot(s.tag(rule.Name, b.Key))
		if sa > sb {
			a, b, sa, sb = b, a, sb, sa
		}
		ma, err := cluster.MasterOf(int(sa))
		if err != nil {
			t.Fatal(err)
		}
		mb, err := cluster.MasterOf(int(sb))
		if err != nil {
			t.Fatal(err)
		}
		if ma != mb {
			first, second, frozen = a, b, mb
		}
	}
	if _, err := s.Take(ctx(t), []floodgate.Hit{first}); err != nil { // learn the topology
		t.Fatal(err)
	}
	// Frozen for well under cluster-node-timeout: no failover starts.
	if err := frozen.Stop(); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err := s.Take(c, []floodgate.Hit{first, second})
	cancel()
	if contErr := frozen.Cont(); contErr != nil {
		t.Fatal(contErr)
	}
	if err == nil {
		t.Fatal("a check whose second slot is frozen succeeded")
	}
	eventually(t, 5*time.Second, func() error {
		if got := slotState(t, raw, s, rule, first.Key); got != "1" {
			return fmt.Errorf("first slot holds %q entries, want 1 (the warm-up take only); the failed check's reservation must be rolled back", got)
		}
		return nil
	})
}
