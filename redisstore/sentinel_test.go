package redisstore

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/rueidis"
)

// TestSentinel runs the store through three sentinels (a master and a
// replica) with rueidis's Sentinel client, configured by URL: the
// conformance suite and the concurrency proofs of 8 replicas.
func TestSentinel(t *testing.T) {
	sentinel := redistest.StartSentinel(t, 1)
	master, err := sentinel.Master()
	if err != nil {
		t.Fatal(err)
	}
	raw := directClient(t, master.Addr())

	t.Run("Mode", func(t *testing.T) {
		s := newStoreURL(t, sentinel.URL())
		c, err := s.dialed.get(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.Mode() != rueidis.ClientModeSentinel {
			t.Fatalf("client mode %v, want sentinel", c.Mode())
		}
	})
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) floodgate.Store { return newStoreURL(t, sentinel.URL()) })
	})
	t.Run("ReplicasAdmitExactlyTheLimit", func(t *testing.T) {
		ls, _ := replicasOn(t, sentinel.URL(), 8)
		testExactLimit(t, ls)
	})
	t.Run("ReplicasMultiKeyNeverExceedAnyLimit", func(t *testing.T) {
		ls, store := replicasOn(t, sentinel.URL(), 8)
		testMultiKey(t, ls, store, raw)
	})
}
