package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
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

// TestCluster runs the store on a one-node Redis Cluster, through
// rueidis's Cluster client.
func TestCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	s := newStoreOn(t, srv.Addr())
	c, err := s.conn(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", c.Mode())
	}
	for key, want := range map[string]uint16{"somekey": 11058, "foo{hash_tag}": 2515, s.tag("login", "{x}") + "s": keySlot(s.tag("login", "{x}") + "s")} {
		got, err := c.Do(ctx(t), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil || uint16(got) != want || keySlot(key) != want {
			t.Errorf("CLUSTER KEYSLOT %q = %d, %v; keySlot says %d", key, got, err, keySlot(key))
		}
	}
	for _, alg := range algorithms {
		r := mustRule(t, "cluster", 2, time.Minute, alg)
		hits := []floodgate.Hit{{Rule: r, Key: "{x}\n"}}
		for i, want := range []bool{true, true, false} {
			res, err := s.Take(ctx(t), "id"+string(rune('a'+i)), hits)
			if err != nil || res[0].Allowed != want {
				t.Fatalf("%v: take %d on a Cluster: %+v, %v", alg, i+1, res, err)
			}
		}
		if err := s.Refund(ctx(t), "ida", hits); err != nil {
			t.Fatalf("%v: refund on a Cluster: %v", alg, err)
		}
		if res, err := s.Peek(ctx(t), hits); err != nil || !res[0].Allowed {
			t.Fatalf("%v: peek after refund on a Cluster: %+v, %v", alg, res, err)
		}
		if err := s.Reset(ctx(t), r, "{x}\n"); err != nil {
			t.Fatalf("%v: reset on a Cluster: %v", alg, err)
		}
	}
	// Keys of two identities hash to two slots: one script cannot take
	// both. The store must say so, not panic.
	ip := floodgate.Hit{Rule: mustRule(t, "ip", 5, time.Minute, floodgate.SlidingWindow), Key: "192.0.2.1"}
	acct := floodgate.Hit{Rule: mustRule(t, "account", 5, time.Minute, floodgate.SlidingWindow), Key: "alice"}
	if keySlot(s.tag("ip", ip.Key)) == keySlot(s.tag("account", acct.Key)) {
		t.Fatal("test keys share a slot; pick others")
	}
	_, err = s.Take(ctx(t), "id", []floodgate.Hit{ip, acct})
	if !errors.Is(err, ErrCrossSlot) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("cross-slot take: %v; want ErrCrossSlot wrapping ErrStoreUnavailable", err)
	}
	if err := s.Refund(ctx(t), "id", []floodgate.Hit{ip, acct}); !errors.Is(err, ErrCrossSlot) {
		t.Fatalf("cross-slot refund: %v; want ErrCrossSlot", err)
	}
	// Even past the check, a rueidis panic must come back as an error.
	res := exec(context.Background(), c, takeScript, []string{"{a}", "{b}"}, []string{"0", "0"})
	if res.Error() == nil {
		t.Fatal("exec of a cross-slot script succeeded")
	}
}
