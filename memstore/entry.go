package memstore

import (
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
)

// entry is the state of one key under one rule. Times are Unix
// nanoseconds of the store's clock.
type entry struct {
	// log holds the admitted requests of a sliding-window rule, oldest
	// first: one stamp per unit of cost.
	log []stamp
	// tat is a token bucket's theoretical arrival time; count and window
	// are a fixed window's count and index, and prev, for a sliding-window
	// counter, the count of the window before.
	tat, count, window, prev int64
	// refunded records, for token buckets and fixed windows, the take ids
	// already refunded (until when to remember them), so that Refund is
	// idempotent.
	refunded map[string]int64
	// epoch names the entry's state (floodgate.Stamp.Epoch): every entry
	// created, or reused once expired, gets a new one from its shard.
	epoch uint64
	// expires is when the entry stops mattering and may be dropped.
	expires int64
	// k is the entry's key, and next the next entry whose key has the same
	// hash (see shard).
	k    entryKey
	next *entry
}

type stamp struct {
	at int64
	id string
}

// check returns what taking h now would answer, trimming expired state but
// recording nothing.
func (e *entry) check(now int64, h floodgate.Hit) floodgate.Result {
	r := h.Rule
	limit, window, cost := r.Limit, int64(r.Window), h.Cost
	switch r.Algorithm {
	case floodgate.TokenBucket:
		t := interval(r)
		capacity := r.Capacity() * t
		tat := max(e.tat, now)
		next := tat + cost*t
		if next-now <= capacity {
			return floodgate.Result{Allowed: true, Remaining: (capacity - (next - now)) / t, ResetAfter: dur(next - now)}
		}
		return floodgate.Result{Remaining: (capacity - (tat - now)) / t, ResetAfter: dur(tat - now), RetryAfter: dur(next - now - capacity)}
	case floodgate.FixedWindow:
		idx := floorDiv(now, window)
		if e.window != idx {
			e.window, e.count = idx, 0
		}
		end := (idx + 1) * window
		if e.count+cost <= limit {
			return floodgate.Result{Allowed: true, Remaining: limit - e.count - cost, ResetAfter: dur(end - now)}
		}
		return floodgate.Result{Remaining: max(0, limit-e.count), ResetAfter: dur(end - now), RetryAfter: dur(end - now)}
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
		return counter(now-idx*window, limit, window, cost, e.prev, e.count)
	default:
		e.trim(now - window)
		n := int64(len(e.log))
		if n+cost <= limit {
			return floodgate.Result{Allowed: true, Remaining: limit - n - cost, ResetAfter: dur(window)}
		}
		return floodgate.Result{
			Remaining:  max(0, limit-n),
			ResetAfter: dur(e.log[n-1].at + window - now),
			RetryAfter: dur(e.log[n+cost-limit-1].at + window - now),
		}
	}
}

// record adds h to the entry; check must have allowed it at the same now.
// It returns the hit's stamp.
func (e *entry) record(now int64, id string, h floodgate.Hit) floodgate.Stamp {
	r := h.Rule
	cost := h.Cost
	switch r.Algorithm {
	case floodgate.TokenBucket:
		e.tat = max(e.tat, now) + cost*interval(r)
		e.expires = max(e.expires, e.tat)
	case floodgate.FixedWindow:
		e.count += cost
		e.expires = max(e.expires, (e.window+1)*int64(r.Window))
	case floodgate.SlidingWindowCounter:
		e.count += cost
		e.expires = max(e.expires, (e.window+2)*int64(r.Window)) // the next window still weighs it
	default:
		for range cost {
			e.log = append(e.log, stamp{at: now, id: id})
		}
		e.expires = max(e.expires, now+int64(r.Window))
	}
	return floodgate.Stamp{At: time.Unix(0, now), Epoch: e.epoch}
}

// refund undoes, once, what the take id recorded for h with stamp st, as
// far as it provably still weighs on the entry: the proof is
// floodgate.Store.Refund's.
func (e *entry) refund(now int64, id string, h floodgate.Hit, st floodgate.Stamp) {
	r := h.Rule
	cost := h.Cost
	if r.Algorithm == floodgate.SlidingWindow {
		e.log = slicesDeleteID(e.log, id)
		return
	}
	if st.Epoch == 0 || st.Epoch != e.epoch {
		return // the take was recorded in a state that is gone
	}
	window := int64(r.Window)
	age := max(0, now-st.At.UnixNano())
	var credit int64 // what is provably left of the take
	switch r.Algorithm {
	case floodgate.TokenBucket:
		credit = max(0, cost*interval(r)-age)
	case floodgate.FixedWindow, floodgate.SlidingWindowCounter:
		if floorDiv(now-age, window) == floorDiv(now, window) {
			credit = cost
		}
	}
	if credit == 0 {
		// Nothing to undo, now or later: age only grows, so no later
		// refund of id credits anything either.
		return
	}
	if _, done := e.refunded[id]; done {
		return
	}
	if e.refunded == nil {
		e.refunded = make(map[string]int64)
	}
	for k, t := range e.refunded {
		if t <= now {
			delete(e.refunded, k)
		}
	}
	// Remembered for as long as a later refund could credit anything: to
	// the end of the current window, or until a token bucket's credit has
	// run out.
	until := (floorDiv(now, window) + 1) * window
	if r.Algorithm == floodgate.TokenBucket {
		until = now + credit
	}
	e.refunded[id] = until
	e.expires = max(e.expires, until)
	if r.Algorithm == floodgate.TokenBucket {
		e.tat = max(now, e.tat-credit)
		return
	}
	e.check(now, h) // moves the counts to the current window
	e.count = max(0, e.count-credit)
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
	res := floodgate.Result{Remaining: max(0, limit-w-cur)}
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

// trim drops the log's stamps at or before cutoff.
func (e *entry) trim(cutoff int64) {
	i := 0
	for i < len(e.log) && e.log[i].at <= cutoff {
		i++
	}
	if i > 0 {
		n := copy(e.log, e.log[i:])
		clear(e.log[n:])
		e.log = e.log[:n]
	}
}

func slicesDeleteID(log []stamp, id string) []stamp {
	out := log[:0]
	for _, s := range log {
		if s.id != id {
			out = append(out, s)
		}
	}
	clear(log[len(out):])
	return out
}

// interval is a token bucket's emission interval in nanoseconds.
func interval(r floodgate.Rule) int64 { return int64(algo.Interval(r)) }

func dur(ns int64) time.Duration { return time.Duration(ns) }
