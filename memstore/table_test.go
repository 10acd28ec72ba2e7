package memstore

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestTableMatchesAMap: through random puts, gets and removals, with
// hashes drawn from a handful of values (so that homes collide, runs of
// entries wrap past the end of the slots, and entries of one hash sit
// apart), the table holds exactly what a map of identities holds, finds
// every entry it holds and none it does not, and keeps every entry
// reachable from its home with no empty slot between.
func TestTableMatchesAMap(t *testing.T) {
	for _, spread := range []int{1, 3, 16, 1 << 20} {
		t.Run("hashes="+strconv.Itoa(spread), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(spread), 28))
			var tb table
			model := map[entryKey]*entry{}
			hashOf := func(i int) uint64 {
				// Top bits pick the home: a few values, and the last one
				// homes at the end of the slots, so its run wraps.
				return uint64(i%spread)*0x9e3779b97f4a7c15 | 0xff<<56*uint64(i%2)
			}
			keyOf := func(i int) entryKey {
				return entryKey{rule: "r", window: time.Minute, key: strconv.Itoa(i)}
			}
			check := func(step int) {
				t.Helper()
				if tb.n != len(model) {
					t.Fatalf("step %d: n = %d, model holds %d", step, tb.n, len(model))
				}
				held := 0
				for i, sl := range tb.slots {
					e := sl.e
					if e == nil {
						continue
					}
					if sl.hash != e.hash {
						t.Fatalf("step %d: slot %d holds hash %#x for an entry of hash %#x", step, i, sl.hash, e.hash)
					}
					held++
					if model[e.k] != e {
						t.Fatalf("step %d: slot %d holds %v, which the model does not", step, i, e.k)
					}
					for j := tb.home(e.hash); j != i; j = (j + 1) & (len(tb.slots) - 1) {
						if tb.slots[j].e == nil {
							t.Fatalf("step %d: %v at %d is cut off from its home %d by the empty slot %d", step, e.k, i, tb.home(e.hash), j)
						}
					}
				}
				if held != tb.n || tb.n*4 > len(tb.slots)*3 {
					t.Fatalf("step %d: %d entries in slots, n = %d, %d slots", step, held, tb.n, len(tb.slots))
				}
			}
			for step := range 20_000 {
				i := rng.IntN(300)
				k, h := keyOf(i), hashOf(i)
				got := tb.get(h, &k)
				if got != model[k] {
					t.Fatalf("step %d: get %v = %p, model %p", step, k, got, model[k])
				}
				switch {
				case got == nil:
					e := &entry{k: k, hash: h}
					tb.put(e)
					model[k] = e
				case rng.IntN(2) == 0:
					if !tb.remove(got) {
						t.Fatalf("step %d: remove %v: not found", step, k)
					}
					if tb.remove(got) {
						t.Fatalf("step %d: removed %v twice", step, k)
					}
					delete(model, k)
				}
				if step%97 == 0 {
					check(step)
				}
			}
			check(-1)
		})
	}
}

// TestSweepVisitsEveryEntry: a sweep removes every expired entry and no
// other, even where removals shift entries back into slots it has passed
// and across the wrap of the slots.
func TestSweepVisitsEveryEntry(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		sh := &shard{}
		var live []*entry
		for i := range 40 + rng.IntN(200) {
			k := entryKey{rule: "r", window: time.Minute, key: strconv.Itoa(i)}
			e := &entry{k: k, hash: uint64(rng.IntN(5)) << 61, expires: int64(rng.IntN(2))} // few homes: long runs
			sh.entries.put(e)
			if e.expires > 0 {
				live = append(live, e)
			}
		}
		sh.sweep(0)
		if sh.entries.n != len(live) {
			t.Fatalf("seed %d: %d entries after the sweep, want %d", seed, sh.entries.n, len(live))
		}
		for _, e := range live {
			if sh.get(e.hash, &e.k) != e {
				t.Fatalf("seed %d: live entry %v lost", seed, e.k)
			}
		}
	}
}
