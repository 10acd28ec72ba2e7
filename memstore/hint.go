package memstore

import (
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
)

// hint is what a shard knows of the token-bucket key it denied last: its
// entry and the entry's TAT, as they were when a check under the shard's
// lock denied it. A take of that key that the hint denies is decided
// without the lock, and writes nothing: a key under attack, denied again
// and again, keeps its goroutines off the shard's lock, where they would
// queue and park. A take that the hint would admit, or that another key
// makes, goes through the lock as before.
//
// The hint stays exact because every change of the entry's state goes
// through the lock, and each one that can change the entry's TAT (a take
// it admits, a Take of several hits, a Refund, a Renew, a Reset, a
// removal) drops the hint first, before the lock is released: a take
// that read the hint before is decided as if it ran before that change,
// which overlapped it. The hint is written, and dropped, under the
// shard's lock, and read under a sequence count (odd while it changes),
// so that a reader never pairs one entry with another's TAT.
//
// at is the latest time a check of the hinted key ran at, which a take
// decided from the hint runs at if its clock reads earlier, so that the
// key's time never goes back (Options.Now).
type hint struct {
	seq  atomic.Uint64
	hash atomic.Uint64 // the entry's, compared before the entry is read
	e    atomic.Pointer[entry]
	tat  atomic.Int64
	at   atomic.Int64
}

// denies decides from the hint a token-bucket take of cost at now of the
// key k, whose hash is hash, under a rule of emission interval t and
// capacity times t capacity: if the hint is k's and denies the take, it
// writes the denial into *r, which is zero, and reports true. Otherwise
// the take must be decided under the shard's lock. With clamp (a clock
// of Options.Now, which may go back), the hint's time moves on to the
// take's; the system clock never goes back, which spares the write.
func (ht *hint) denies(hash uint64, k *entryKey, now, cost, t, capacity int64, r *floodgate.Result, clamp bool) bool {
	seq := ht.seq.Load()
	if ht.hash.Load() != hash || seq&1 != 0 {
		return false
	}
	e := ht.e.Load()
	if e == nil || !e.k.same(k) { // an entry's key and hash never change
		return false
	}
	tat, at := ht.tat.Load(), ht.at.Load()
	if ht.seq.Load() != seq {
		return false
	}
	now = max(now, at)
	if !bucketDenial(r, tat, now, cost, t, capacity) {
		return false
	}
	if clamp {
		ht.advance(now)
	}
	return true
}

// advance moves the hint's time on to now, if later.
func (ht *hint) advance(now int64) {
	for at := ht.at.Load(); now > at && !ht.at.CompareAndSwap(at, now); at = ht.at.Load() {
	}
}

// holds reports whether the hint is e's. The shard's lock must be held.
func (ht *hint) holds(e *entry) bool { return ht.e.Load() == e }

// set makes the hint e's, denied at now with e's TAT. The shard's lock
// must be held.
func (ht *hint) set(e *entry, now int64) {
	if ht.e.Load() == e && ht.tat.Load() == e.tat {
		ht.advance(now)
		return
	}
	ht.seq.Add(1)
	ht.hash.Store(e.hash)
	ht.e.Store(e)
	ht.tat.Store(e.tat)
	ht.at.Store(now)
	ht.seq.Add(1)
}

// drop empties the hint. The shard's lock must be held.
func (ht *hint) drop() { ht.e.Store(nil) }
