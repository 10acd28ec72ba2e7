package memstore

import (
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestShardChainsCollidingHashes: entries whose hashes collide live in
// one chain, and each stays reachable and deletable on its own.
func TestShardChainsCollidingHashes(t *testing.T) {
	sh := &shard{entries: map[uint64]*entry{}}
	keys := []entryKey{
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Minute, key: "k"},
		{rule: "b", alg: floodgate.SlidingWindow, window: time.Minute, key: "k"},
		{rule: "a", alg: floodgate.TokenBucket, window: time.Minute, key: "k"},
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Minute, key: "k", digest: true}, // a digest equal to a key held as is
	}
	const h = 42 // one hash for all: a forced collision
	for i := range keys {
		e := sh.getOrCreate(h, &keys[i], 0, 0)
		e.count = int64(i + 1)
	}
	if sh.n != len(keys) || len(sh.entries) != 1 {
		t.Fatalf("n = %d, map holds %d; want %d entries in one chain", sh.n, len(sh.entries), len(keys))
	}
	for i := range keys {
		if e := sh.get(h, &keys[i]); e == nil || e.count != int64(i+1) {
			t.Fatalf("get %v = %+v; want the entry with count %d", keys[i], e, i+1)
		}
	}
	for _, del := range []int{1, 3, 2, 0} { // middle, head, head, last
		sh.del(h, &keys[del])
		if sh.get(h, &keys[del]) != nil {
			t.Fatalf("entry %v still there after del", keys[del])
		}
	}
	if sh.n != 0 || len(sh.entries) != 0 {
		t.Fatalf("n = %d, map holds %d after deleting everything", sh.n, len(sh.entries))
	}
	sh.del(h, &keys[0]) // deleting a missing key is a no-op
}

// TestRingHoldsWhatItsWindowHolds: a ring below its limit drops the times
// that have left the window when it records, so that a key of a high
// limit holds its window's requests, not its limit's.
func TestRingHoldsWhatItsWindowHolds(t *testing.T) {
	const window = int64(time.Minute)
	e := &entry{}
	for i := range int64(10) {
		e.add(i, 1, 1000, window)
	}
	if len(e.ring) != 10 {
		t.Fatalf("ring of %d times after 10 takes, want 10", len(e.ring))
	}
	now := 5 + window // the times 0 to 5 have left the window
	e.add(now, 2, 1000, window)
	want := []int64{6, 7, 8, 9, now, now}
	if !slices.Equal(e.ring, want) || e.head != 0 {
		t.Fatalf("ring %v (head %d), want %v", e.ring, e.head, want)
	}
}
