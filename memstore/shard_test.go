package memstore

import (
	"hash/maphash"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/floodgate-rl/floodgate"
)

// TestShardHoldsCollidingHashes: entries whose hashes collide all live
// in the table, and each stays reachable and deletable on its own.
func TestShardHoldsCollidingHashes(t *testing.T) {
	sh := &shard{}
	keys := []entryKey{
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Minute, key: "k"},
		{rule: "b", alg: floodgate.SlidingWindow, window: time.Minute, key: "k"},
		{rule: "a", alg: floodgate.TokenBucket, window: time.Minute, key: "k"},
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Minute, key: "k", digest: true}, // a digest equal to a key held as is
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Hour, key: "k"},
		{rule: "a", alg: floodgate.SlidingWindow, window: time.Minute, key: "K"},
		{rule: "A", alg: floodgate.SlidingWindow, window: time.Minute, key: "k"},
	}
	const h = 42 // one hash for all: a forced collision
	var deleted []entryKey
	for i := range keys {
		e := sh.getOrCreate(h, &keys[i], 0, 0, false)
		e.count = int64(i + 1)
	}
	if sh.entries.n != len(keys) {
		t.Fatalf("n = %d; want %d entries", sh.entries.n, len(keys))
	}
	for i := range keys {
		if e := sh.get(h, &keys[i]); e == nil || e.count != int64(i+1) {
			t.Fatalf("get %v = %+v; want the entry with count %d", keys[i], e, i+1)
		}
	}
	for _, del := range []int{1, 6, 3, 2, 0, 5, 4} { // middle, head, ..., last
		e := sh.get(h, &keys[del])
		sh.del(e)
		if sh.get(h, &keys[del]) != nil {
			t.Fatalf("entry %v still there after del", keys[del])
		}
		for _, k := range keys {
			if e := sh.get(h, &k); e == nil != (slices.Index(deleted, k) >= 0 || k == keys[del]) {
				t.Fatalf("after deleting %v, get %v = %v", keys[del], k, e)
			}
		}
		deleted = append(deleted, keys[del])
		sh.del(e) // deleting an entry no longer held is a no-op
	}
	if sh.entries.n != 0 {
		t.Fatalf("n = %d after deleting everything", sh.entries.n)
	}
}

// TestRingHoldsWhatItsWindowHolds: a ring below its limit drops the times
// that have left the window when it records, so that a key of a high
// limit holds its window's requests, not its limit's.
func TestRingHoldsWhatItsWindowHolds(t *testing.T) {
	const window = int64(time.Minute)
	e := &entry{}
	for i := range int64(10) {
		e.add(i, i, 1, 1000, window)
	}
	if len(e.ring) != 10 {
		t.Fatalf("ring of %d times after 10 takes, want 10", len(e.ring))
	}
	now := 5 + window // the times 0 to 5 have left the window
	e.add(now, now, 2, 1000, window)
	want := []int64{6, 7, 8, 9, now, now}
	if !slices.Equal(e.ring, want) || e.head != 0 {
		t.Fatalf("ring %v (head %d), want %v", e.ring, e.head, want)
	}
}

// TestQueueStaysAHeap: through random enqueues, moves and removals, a
// shard's queue stays a min-heap by time, each entry knows its place in
// it, and a removed entry leaves no trace.
func TestQueueStaysAHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sh := &shard{}
	var in []*entry
	check := func(step int) {
		t.Helper()
		if len(sh.queue) != len(in) {
			t.Fatalf("step %d: queue of %d, want %d", step, len(sh.queue), len(in))
		}
		for i, q := range sh.queue {
			if q.e.queued != i+1 {
				t.Fatalf("step %d: entry at %d thinks it is at %d", step, i, q.e.queued-1)
			}
			if i > 0 && sh.queue[(i-1)/2].at > q.at {
				t.Fatalf("step %d: element %d (%d) is earlier than its parent (%d)", step, i, q.at, sh.queue[(i-1)/2].at)
			}
		}
		if c := cap(sh.queue); c > len(sh.queue) && sh.queue[:c][len(sh.queue)].e != nil {
			t.Fatalf("step %d: the queue keeps a removed entry", step)
		}
	}
	for step := range 5000 {
		switch op := rng.IntN(3); {
		case op == 0 || len(in) == 0:
			e := &entry{}
			sh.enqueue(e, rng.Int64N(100))
			in = append(in, e)
		case op == 1:
			sh.enqueue(in[rng.IntN(len(in))], rng.Int64N(100))
		default:
			i := rng.IntN(len(in))
			e := in[i]
			sh.dequeue(e)
			if e.queued != 0 {
				t.Fatalf("step %d: a removed entry thinks it is queued", step)
			}
			in = slices.Delete(in, i, i+1)
		}
		check(step)
	}
}

// TestReclaimLooksAtAFewEntriesPerCheck: in a full shard of 1,000 keys
// whose queue times are all out of date (takes raised their expiries
// since) and one of which no longer weighs, each check that needs room
// moves at most reclaimSteps of them to their place, so it finds the one
// that no longer weighs within 1,000/reclaimSteps checks, never by
// scanning the shard; once the queue is up to date, a check finds at its
// head that nothing can be reclaimed and moves nothing.
func TestReclaimLooksAtAFewEntriesPerCheck(t *testing.T) {
	const n = 1000
	seed := maphash.MakeSeed()
	sh := &shard{}
	key := func(i int) entryKey { return entryKey{rule: "r", window: time.Minute, key: strconv.Itoa(i)} }
	for i := range n {
		k := key(i)
		e := sh.getOrCreate(identity(seed, &k), &k, 0, n, false) // queued at 1
		e.expires = 1000
		if i == n/2 {
			e.expires = 5
		}
	}
	stale := func() int {
		c := 0
		for _, q := range sh.queue {
			if q.at == 1 {
				c++
			}
		}
		return c
	}
	const now = 10
	checks := 0
	for before := stale(); !sh.reclaim(now, n); before = stale() {
		if moved := before - stale(); moved < 1 || moved > reclaimSteps {
			t.Fatalf("check %d moved %d entries; want 1 to %d", checks, moved, reclaimSteps)
		}
		if checks++; checks > n/reclaimSteps {
			t.Fatalf("no room after %d checks", checks)
		}
	}
	if gone := key(n / 2); sh.entries.n != n-1 || sh.get(identity(seed, &gone), &gone) != nil {
		t.Fatalf("n = %d after reclaiming; want %d, without the key that no longer weighed", sh.entries.n, n-1)
	}
	for stale() > 0 {
		sh.reclaim(now, n-1)
	}
	queue := slices.Clone(sh.queue)
	if sh.reclaim(now, n-1) || !slices.Equal(queue, sh.queue) {
		t.Fatal("a check of an up-to-date queue of keys that all weigh reclaimed or moved something")
	}
}

// TestRestartLeavesAFreshState: an entry restarted in place holds what a
// new entry holds (entry{}), but for its key, hash, place in the queue
// and the room of its ring, whatever every other field held: a field
// added to entry and forgotten by restart fails here. A token bucket's
// entry never writes the fields of the other algorithms (a state's
// identity holds its algorithm), which restart leaves as they are: zero.
func TestRestartLeavesAFreshState(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.Concurrency} {
		e := &entry{}
		v := reflect.ValueOf(e).Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // settable
			switch f.Kind() {
			case reflect.Int, reflect.Int64:
				f.SetInt(int64(i + 3))
			case reflect.Uint64:
				f.SetUint(uint64(i + 3))
			case reflect.Slice:
				f.Set(reflect.MakeSlice(f.Type(), 3, 8))
			case reflect.Map:
				f.Set(reflect.MakeMap(f.Type()))
				f.SetMapIndex(reflect.ValueOf(uint64(1)), reflect.ValueOf(int64(2)))
			case reflect.Struct: // the key
				f.Set(reflect.ValueOf(entryKey{rule: "r", alg: alg, window: time.Minute, key: "k"}))
			case reflect.Pointer:
				f.Set(reflect.ValueOf(&entry{}))
			default:
				t.Fatalf("field %s of kind %v: teach this test to fill it", v.Type().Field(i).Name, f.Kind())
			}
		}
		if alg == floodgate.TokenBucket {
			e.count, e.window, e.prev, e.ring, e.head = 0, 0, 0, nil, 0
		}
		ring := e.ring
		want := entry{ring: ring[:0], epoch: 99, k: e.k, hash: e.hash, queued: e.queued}
		e.restart(99)
		if !reflect.DeepEqual(*e, want) || cap(e.ring) != cap(ring) {
			t.Fatalf("%v: restarted entry %+v; want %+v", alg, *e, want)
		}
	}
}

// TestShardIsThreeCacheLines pins the shard's size that its padding
// promises: a multiple of 64 bytes, so that the page-aligned slice of
// shards puts no two shards' fields on one cache line.
func TestShardIsThreeCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n != 192 {
		t.Errorf("a shard is %d bytes, want 192", n)
	}
}
