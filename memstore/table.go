package memstore

import "math/bits"

// table holds a shard's entries by the hash of their identity, which also
// picked the shard (its low bits), so that a key is hashed once: open
// addressing with linear probing over a power-of-two array of slots, at
// most three quarters full, where an entry's home slot is the top bits of
// its hash. Entries whose hashes collide, or whose homes do, sit in the
// slots that follow, and a lookup compares the full identity of each
// entry it meets. Removal shifts the entries after the hole back, so that
// no tombstone is left and a lookup stops at the first empty slot.
//
// Each slot holds its entry's hash beside the pointer, so that a probe
// past another key's entry compares hashes in the array and never reads
// that entry: on a store of many keys, each entry read is a cache miss.
// A lookup reads one slot of an array (and the slots after it, on the
// same cache line) and the entry it finds, in a few instructions
// inlined into the caller, where the map of hashes to chains of entries
// that it replaces went through a call into the runtime's map code
// (BENCHMARKS.md counts what it saves).
type table struct {
	slots []tslot
	shift uint // 64 - log2(len(slots)): a hash's home is hash >> shift
	n     int  // entries held
}

// tslot is a slot of a table: an entry and its hash, or nil.
type tslot struct {
	hash uint64
	e    *entry
}

// home is the slot where the probes for hash h start.
func (t *table) home(h uint64) int { return int(h >> t.shift) }

// get returns the entry of k, whose hash is h, or nil.
func (t *table) get(h uint64, k *entryKey) *entry {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil || sl.hash == h && sl.e.k.same(k) {
			return sl.e
		}
	}
}

// put adds e, which t does not hold, under e.hash.
func (t *table) put(e *entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(e.hash)
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = tslot{e.hash, e}
	t.n++
}

// grow doubles the slots (eight at first) and places every entry anew.
func (t *table) grow() {
	old := t.slots
	size := max(8, 2*len(old))
	t.slots = make([]tslot, size)
	t.shift = 64 - uint(bits.TrailingZeros(uint(size)))
	t.n = 0
	for _, sl := range old {
		if sl.e != nil {
			t.put(sl.e)
		}
	}
}

// remove takes e out of t and reports whether t held it.
func (t *table) remove(e *entry) bool {
	if t.n == 0 {
		return false
	}
	mask := len(t.slots) - 1
	i := t.home(e.hash)
	for t.slots[i].e != e {
		if t.slots[i].e == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Shift back each entry after the hole whose probes pass the hole
	// before they reach it: one whose home is not in the hole's run
	// after the hole, cyclically.
	for j := i; ; {
		j = (j + 1) & mask
		f := t.slots[j]
		if f.e == nil {
			break
		}
		if (j-t.home(f.hash))&mask >= (j-i)&mask {
			t.slots[i] = f
			i = j
		}
	}
	t.slots[i] = tslot{}
	t.n--
	return true
}
