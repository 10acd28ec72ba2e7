package memstore

import (
	"slices"
	"sort"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
)

// entry is the state of one key under one rule. Times are Unix
// nanoseconds of the store's clock.
type entry struct {
	// The fields a token bucket's take reads and writes come first, in
	// the first 96 bytes (two cache lines), and the rest after: a
	// decision on one of many keys misses the cache on each line it
	// touches.

	// k is the entry's key, and hash the hash of its identity (see
	// table).
	hash uint64
	k    entryKey
	// tat is a token bucket's theoretical arrival time.
	tat int64
	// expires is when the entry stops mattering and may be dropped.
	expires int64
	// epoch names the entry's state (floodgate.Stamp.Epoch): every entry
	// created, or reused once expired, gets a new one from its shard.
	// takes counts the hits the state recorded: each hit's Stamp.Take.
	epoch, takes uint64
	// refunded records the takes already refunded, by their
	// floodgate.Stamp.Take (until when to remember them), so that Refund
	// is idempotent.
	refunded map[uint64]int64

	// count and window are a fixed window's count and index, and prev,
	// for a sliding-window counter, the count of the window before.
	count, window, prev int64
	// ring holds a sliding-window rule's last admitted requests, one time
	// per unit of cost, in admission order from index head (the oldest),
	// wrapping once it holds Limit of them: the same ring as redisstore's
	// (take.lua). A request of cost n is admitted exactly when the n-th
	// oldest of the last Limit times has left the window, and admitting
	// it overwrites the n oldest.
	ring []int64
	head int
	// queued is 1 + the entry's index in its shard's queue, or 0 when
	// it is not in it (the store is unbounded): see reclaim.go.
	queued int
}

// check returns what taking h now would answer, trimming expired state but
// recording nothing. An Overdraw hit past its limit is answered as the key
// stands with it recorded (floodgate.Hit.Overdraw): a denial of cost 1.
// t is hitInterval(h), which a take computes once for check and record.
func (e *entry) check(now int64, h *floodgate.Hit, t int64) floodgate.Result {
	r := h.Rule
	limit, window, cost := r.Limit, int64(r.Window), h.Cost
	// A cost above the capacity never fits, and is computed with only as
	// what the key holds past its limit (bounded), never multiplied.
	fits := !h.Overdraw || cost <= r.Capacity()
	switch r.Algorithm {
	case floodgate.TokenBucket:
		capacity := r.Capacity() * t
		tat := max(e.tat, now)
		if fits {
			next := tat + cost*t
			if next-now <= capacity {
				// A lease (floodgate.Hit.Lease) conforms now and is
				// recorded as taken at now+Lease: the figures are the
				// key's with it so recorded.
				at := max(tat, now+int64(h.Lease)) + cost*t
				return floodgate.Result{Allowed: true, Remaining: max(0, floorDiv(capacity-(at-now), t)), ResetAfter: dur(at - now)}
			}
			if !h.Overdraw {
				return floodgate.Result{Remaining: floorDiv(capacity-(tat-now), t), ResetAfter: dur(tat - now), RetryAfter: dur(next - now - capacity)}
			}
		}
		next, _ := bucketOver(now, tat, cost, t, capacity, int64(algo.Ahead(r)))
		return floodgate.Result{Remaining: floorDiv(capacity-(next-now), t), ResetAfter: dur(next - now), RetryAfter: dur(next + t - now - capacity)}
	case floodgate.FixedWindow:
		idx := floorDiv(now, window)
		if e.window != idx {
			e.window, e.count = idx, 0
		}
		end := (idx + 1) * window
		if e.count+cost <= limit {
			return floodgate.Result{Allowed: true, Remaining: limit - e.count - cost, ResetAfter: dur(end - now)}
		}
		count := e.count
		if h.Overdraw {
			count, _ = addUpTo(count, cost, algo.MaxCount(r))
		}
		return floodgate.Result{Remaining: limit - count, ResetAfter: dur(end - now), RetryAfter: dur(end - now)}
	case floodgate.SlidingWindowCounter:
		idx := floorDiv(now, window)
		switch e.window {
		case idx:
		case idx - 1:
			e.prev, e.count = e.count, 0
		default:
			e.prev, e.count = 0, 0
		}
		e.window = idx
		t := now - idx*window
		if fits {
			if res := counter(t, limit, window, cost, e.prev, e.count); res.Allowed || !h.Overdraw {
				return res
			}
		}
		cur, _ := addUpTo(e.count, cost, algo.CounterMax(r))
		return counter(t, limit, window, 1, e.prev, cur)
	default:
		n := int64(len(e.ring))
		live := e.live(now - window)
		if live+cost <= limit {
			// Recorded at now (now+Lease for a lease), or at the newest
			// time if later, which weighs until a window after it.
			at := now + int64(h.Lease)
			if n > 0 {
				at = max(at, e.at(n-1))
			}
			return floodgate.Result{Allowed: true, Remaining: limit - live - cost, ResetAfter: dur(at + window - now)}
		}
		if h.Overdraw {
			// The ring's live times, then cost times at t: the one at
			// index live+cost-limit frees room for a request of cost 1.
			// Times beyond the bound are the oldest, which leave first
			// and decide nothing (floodgate.Hit.Overdraw).
			t := now
			if n > 0 {
				t = max(now, e.at(n-1))
			}
			frees, i := t, live+cost-limit
			if i < live {
				frees = e.at(n - live + i)
			}
			return floodgate.Result{
				Remaining:  limit - min(live+cost, algo.LogMax(r)),
				ResetAfter: dur(t + window - now),
				RetryAfter: dur(frees + window - now),
			}
		}
		return floodgate.Result{
			Remaining:  limit - live,
			ResetAfter: dur(e.at(n-1) + window - now),
			RetryAfter: dur(e.at(n+cost-limit-1) + window - now), // live: see live
		}
	}
}

// takeBucket is check, then record if allowed, of a token bucket's hit
// of cost that is neither Overdraw nor a lease, with the same figures, in
// one pass: the hot path of a memory store. It writes the result into
// *r, which is zero. t is the rule's emission interval and capacity its
// capacity times t.
func (e *entry) takeBucket(r *floodgate.Result, now, cost, t, capacity int64) {
	if bucketDenial(r, e.tat, now, cost, t, capacity) {
		return
	}
	next := max(e.tat, now) + cost*t
	e.tat = next
	e.expires = max(e.expires, next)
	e.takes++
	r.Allowed = true
	r.Remaining = (capacity - (next - now)) / t // capacity >= next-now: no rounding down to do
	r.ResetAfter = dur(next - now)
	r.Stamp = floodgate.Stamp{At: time.Unix(0, now), Epoch: e.epoch, Take: e.takes}
}

// bucketDenial reports whether a token bucket whose TAT is tat denies a
// take of cost at now (t and capacity as for takeBucket), and if so writes
// the denial into *r, which is zero.
func bucketDenial(r *floodgate.Result, tat, now, cost, t, capacity int64) bool {
	tat = max(tat, now)
	next := tat + cost*t
	if next-now <= capacity {
		return false
	}
	r.Remaining, r.ResetAfter, r.RetryAfter = floorDiv(capacity-(tat-now), t), dur(tat-now), dur(next-now-capacity)
	return true
}

// record adds h to the entry; check must have allowed it at the same now,
// unless h is Overdraw. It returns the hit's stamp, and whether the hit
// carried the key past what its state holds (floodgate.Hit.Overdraw):
// the caller then renews the entry's epoch, so that no refund of the hit
// or of an earlier one credits anything. t is hitInterval(h), as for
// check.
func (e *entry) record(now int64, h *floodgate.Hit, t int64) (floodgate.Stamp, bool) {
	r := h.Rule
	cost := h.Cost
	full := false // only an Overdraw hit can fill the state
	// A lease is recorded as taken at now+lease (floodgate.Hit.Lease): a
	// log's times and a bucket's TAT; a window's count does not tell
	// times apart.
	lease := int64(h.Lease)
	at := now
	if r.Algorithm == floodgate.TokenBucket || r.Algorithm == floodgate.SlidingWindow {
		at = now + lease
	}
	switch r.Algorithm {
	case floodgate.TokenBucket:
		if h.Overdraw {
			e.tat, full = bucketOver(now, max(e.tat, now), cost, t, r.Capacity()*t, int64(algo.Ahead(r)))
		} else {
			e.tat = max(e.tat, now+lease) + cost*t
		}
		e.expires = max(e.expires, e.tat)
	case floodgate.FixedWindow:
		if h.Overdraw {
			e.count, full = addUpTo(e.count, cost, algo.MaxCount(r))
		} else {
			e.count += cost
		}
		e.expires = max(e.expires, (e.window+1)*int64(r.Window))
	case floodgate.SlidingWindowCounter:
		if h.Overdraw {
			e.count, full = addUpTo(e.count, cost, algo.CounterMax(r))
		} else {
			e.count += cost
		}
		e.expires = max(e.expires, (e.window+2)*int64(r.Window)) // the next window still weighs it
	default:
		window := int64(r.Window)
		if !h.Overdraw || e.live(now-window)+cost <= r.Limit {
			e.add(now, at, cost, r.Limit, window)
		} else {
			full = e.over(now, cost, window, algo.LogMax(r))
		}
		e.expires = max(e.expires, at+window)
	}
	e.takes++
	return floodgate.Stamp{At: time.Unix(0, at), Epoch: e.epoch, Take: e.takes}, full
}

// restart gives the entry a fresh state, epoch, once it has expired (it
// holds nothing that still matters): what entry{} holds, but for its
// key and hash, place in the reclaim queue and ring's room. A token
// bucket's entry never writes the other algorithms' fields (its identity
// holds its algorithm), so they are left alone: on a store of many keys,
// a line of memory not written is a cache miss spared.
func (e *entry) restart(epoch uint64) {
	if e.k.alg != floodgate.TokenBucket {
		e.ring, e.head = e.ring[:0], 0
		e.count, e.window, e.prev = 0, 0, 0
	}
	e.tat = 0
	e.refunded = nil
	e.epoch, e.takes, e.expires = epoch, 0, 0
}

// renew gives the entry a new state, epoch, after a hit carried it past
// what it holds: the refunds of its earlier takes no longer match it.
func (e *entry) renew(epoch uint64) {
	e.epoch, e.refunded = epoch, nil
}

// bucketOver returns a token bucket's TAT after a take of cost (interval
// t, capacity in ns) from tat (at least now), up to ahead (algo.Ahead)
// past a full bucket's, and whether the bound held it back (the TAT never
// moves back). It never overflows, whatever the cost.
func bucketOver(now, tat, cost, t, capacity, ahead int64) (int64, bool) {
	bound := now + capacity + ahead
	if tat <= bound && cost <= (bound-tat)/t {
		return tat + cost*t, false
	}
	return max(tat, bound), true
}

// addUpTo returns count+cost, at most most, and whether most held it back
// (the count never goes down).
func addUpTo(count, cost, most int64) (int64, bool) {
	if cost > most-count {
		return max(count, most), true
	}
	return count + cost, false
}

// at returns the time of the ring's entry i, 0 the oldest.
func (e *entry) at(i int64) int64 {
	j := e.head + int(i) // < 2*len: no division
	if j >= len(e.ring) {
		j -= len(e.ring)
	}
	return e.ring[j]
}

// live returns how many of the ring's times are after cut: its newest.
func (e *entry) live(cut int64) int64 {
	n := int64(len(e.ring))
	switch {
	case n == 0 || e.at(n-1) <= cut:
		return 0
	case e.at(0) > cut: // the common case of a busy key: all of them
		return n
	}
	return n - int64(sort.Search(int(n), func(i int) bool { return e.at(int64(i)) > cut }))
}

// add records cost requests at the time at (now, or a lease's end, later)
// in the ring of a rule of limit per window, at now.
func (e *entry) add(now, at, cost, limit, window int64) {
	n := int64(len(e.ring))
	if n > 0 {
		at = max(at, e.at(n-1)) // keep the ring in order
	}
	if e.head == 0 && n < limit {
		// Not full yet: drop the times that left the window, so that a
		// key of a high limit holds what its window holds, not up to its
		// limit of times long gone.
		if gone := n - e.live(now-window); gone > 0 {
			k := copy(e.ring, e.ring[gone:])
			e.ring, n = e.ring[:k], int64(k)
		}
	}
	if n > limit || e.head != 0 && n < limit {
		// The limit changed: keep the newest times that matter, in order.
		keep := make([]int64, 0, min(n, limit))
		for i := max(0, n-limit); i < n; i++ {
			keep = append(keep, e.at(i))
		}
		e.ring, e.head, n = keep, 0, int64(len(keep))
	}
	for ; cost > 0 && e.head == 0 && n < limit; cost, n = cost-1, n+1 {
		e.ring = append(e.ring, at)
	}
	for ; cost > 0; cost-- { // full: overwrite the oldest, which check proved gone
		e.ring[e.head] = at
		e.head = (e.head + 1) % len(e.ring)
	}
}

// over records cost requests at now in the ring of a window past its
// limit (floodgate.Hit.Overdraw): it keeps the live times and appends
// cost times, keeping at most most (the newest), and reports whether it
// dropped any. It writes the ring anew, from index 0, as take.lua does.
func (e *entry) over(now, cost, window, most int64) bool {
	n := int64(len(e.ring))
	t := now
	if n > 0 {
		t = max(now, e.at(n-1)) // keep the ring in order
	}
	live := e.live(now - window)
	keep, add := min(live, max(0, most-cost)), min(cost, most)
	ring := make([]int64, 0, keep+add)
	for i := n - keep; i < n; i++ {
		ring = append(ring, e.at(i))
	}
	for range add {
		ring = append(ring, t)
	}
	e.ring, e.head = ring, 0
	return keep+add < live+cost
}

// refund undoes, once, what the hit h recorded with stamp st, as far as
// it provably still weighs on the entry: the proof is
// floodgate.Store.Refund's.
func (e *entry) refund(now int64, h *floodgate.Hit, st floodgate.Stamp) {
	r := h.Rule
	cost := h.Cost
	if st.Epoch == 0 || st.Epoch != e.epoch || st.Take == 0 || st.Take > e.takes {
		return // the hit was recorded in a state that is gone, or never
	}
	window := int64(r.Window)
	at := st.At.UnixNano()
	var credit int64 // what is provably left of the take
	switch r.Algorithm {
	case floodgate.TokenBucket:
		// cost*T, which an Overdraw hit's cost could overflow: no take
		// moves a TAT by more than 2^52µs (a full bucket's refill time
		// and algo.Ahead are less), and take.lua bounds it alike.
		t, most := interval(r), int64(1<<52*time.Microsecond)
		credit = most
		if cost <= most/t {
			credit = cost * t
		}
		credit = max(0, credit-max(0, now-at))
	case floodgate.FixedWindow, floodgate.SlidingWindowCounter:
		// A take stamped after now (a clock that stepped back) may lie
		// in a later window than now's: credit nothing.
		if at <= now && floorDiv(at, window) == floorDiv(now, window) {
			credit = cost
		}
	default:
		if at > now-window {
			credit = cost
		}
	}
	if credit == 0 {
		// Nothing to undo, now or later: age only grows, so no later
		// refund of the hit credits anything either.
		return
	}
	if _, done := e.refunded[st.Take]; done {
		return
	}
	if e.refunded == nil {
		e.refunded = make(map[uint64]int64)
	}
	for k, t := range e.refunded {
		if t <= now {
			delete(e.refunded, k)
		}
	}
	// Remembered for as long as a later refund could credit anything: to
	// the end of the current window, until a token bucket's credit has
	// run out, or until the take leaves a sliding window.
	until := (floorDiv(now, window) + 1) * window
	switch r.Algorithm {
	case floodgate.TokenBucket:
		until = now + credit
	case floodgate.SlidingWindow, floodgate.Concurrency:
		until = at + window
	}
	e.refunded[st.Take] = until
	e.expires = max(e.expires, until)
	switch r.Algorithm {
	case floodgate.TokenBucket:
		e.tat = max(now, e.tat-credit)
	case floodgate.SlidingWindow, floodgate.Concurrency:
		e.remove(at, credit)
	default:
		e.check(now, h, 0) // moves the counts to the current window (not a bucket: no interval)
		e.count = max(0, e.count-credit)
	}
}

// remove takes out of the ring up to n of its oldest times at or after at,
// the time of the take refunded, and leaves it in order from index 0.
//
// A take is recorded at its own time, at, or, when the clock stepped
// back behind the ring's newest time, at that newest time (add keeps the
// ring in order). So the oldest times from at on are its own, or times of
// its instant (alike, whichever take recorded them), or times older than
// its own: the times left, in order, are each at least those the ring
// would hold had the refunded takes never happened, so it never admits
// sooner than that (TestRefundNeverFreesMoreThanItsTake). Without a step
// back, these are the times equal to at.
// It returns how many it removed.
//
// It works in place (a lease's release is a remove), putting the ring in
// order from index 0 first: a left rotation by head, as three reversals.
func (e *entry) remove(at, n int64) int64 {
	if e.head != 0 {
		slices.Reverse(e.ring[:e.head])
		slices.Reverse(e.ring[e.head:])
		slices.Reverse(e.ring)
		e.head = 0
	}
	kept, removed := 0, int64(0)
	for _, v := range e.ring {
		if removed < n && v >= at {
			removed++
			continue
		}
		e.ring[kept] = v
		kept++
	}
	e.ring = e.ring[:kept]
	return removed
}

// renewLease moves the entries of the lease that h took with stamp st to
// now, if they still hold their slots, and returns the lease's new stamp,
// or the zero Stamp: floodgate.Store.Renew states the contract and why
// remove finds the lease's own entries. The entries go where a take would
// put them (at now, or at the ring's newest time if the clock stepped
// back), so the ring stays in order.
func (e *entry) renewLease(now int64, h *floodgate.Hit, st floodgate.Stamp) floodgate.Stamp {
	window, at := int64(h.Rule.Window), st.At.UnixNano()
	if h.Rule.Algorithm != floodgate.Concurrency || st.Epoch == 0 || st.Epoch != e.epoch ||
		st.Take == 0 || st.Take > e.takes || at <= now-window {
		return floodgate.Stamp{}
	}
	if _, done := e.refunded[st.Take]; done {
		return floodgate.Stamp{}
	}
	moved := e.remove(at, h.Cost)
	if moved == 0 {
		return floodgate.Stamp{}
	}
	t := now
	if n := len(e.ring); n > 0 {
		t = max(now, e.ring[n-1]) // remove left the ring in order from index 0
	}
	for range moved {
		e.ring = append(e.ring, t)
	}
	e.expires = max(e.expires, t+window)
	return floodgate.Stamp{At: time.Unix(0, t), Epoch: e.epoch, Take: st.Take}
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// counter decides a sliding-window counter: t into the current window of
// length window, with prev and cur requests counted in the previous and
// current windows, a request of cost is admitted iff
// prev*(window-t)/window + cur + cost <= limit, computed exactly in
// integers (see floodgate.SlidingWindowCounter). redisstore's take.lua
// computes the same formulas in microseconds. The rule's validation keeps
// every product below 2^63 (nanoseconds).
func counter(t, limit, window, cost, prev, cur int64) floodgate.Result {
	w := (prev*(window-t) + window - 1) / window // the previous window's weight, rounded up
	if w+cur+cost <= limit {
		// Full again when the window after this one starts (cur+cost > 0).
		return floodgate.Result{Allowed: true, Remaining: limit - w - cur - cost, ResetAfter: dur(2*window - t)}
	}
	res := floodgate.Result{Remaining: limit - w - cur}
	switch {
	case cur > 0:
		res.ResetAfter = dur(2*window - t)
	case prev > 0:
		res.ResetAfter = dur(window - t)
	}
	if r := limit - cur - cost; r >= 0 {
		// This window admits it once prev*(window-t)/window <= r.
		if at := window - r*window/prev; at < window {
			res.RetryAfter = dur(at - t)
			return res
		}
	}
	// The next window, where cur is the previous count, admits it once
	// cur*(window-t)/window <= limit-cost.
	var at int64
	if cur > 0 {
		at = max(0, window-(limit-cost)*window/cur)
	}
	res.RetryAfter = dur(window - t + at)
	return res
}

// interval is a token bucket's emission interval in nanoseconds.
func interval(r floodgate.Rule) int64 { return int64(algo.Interval(r)) }

// hitInterval is the emission interval of h's rule if it is a token
// bucket, and 0 otherwise: what check and record need, computed once per
// take (two divisions).
func hitInterval(h *floodgate.Hit) int64 {
	if h.Rule.Algorithm != floodgate.TokenBucket {
		return 0
	}
	return interval(h.Rule)
}

func dur(ns int64) time.Duration { return time.Duration(ns) }
