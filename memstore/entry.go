package memstore

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// entry is the state of one key under one rule. Times are Unix
// nanoseconds of the store's clock.
type entry struct {
	// log holds the admitted requests of a sliding-window rule, oldest
	// first: one stamp per unit of cost.
	log []stamp
	// tat is a token bucket's theoretical arrival time; count and window
	// are a fixed window's count and index.
	tat, count, window int64
	// refunded records, for token buckets and fixed windows, the take ids
	// already refunded (until when to remember them), so that Refund is
	// idempotent.
	refunded map[string]int64
	// expires is when the entry stops mattering and may be dropped.
	expires int64
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
	if cost == 0 {
		cost = 1
	}
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
		idx := now / window
		if e.window != idx {
			e.window, e.count = idx, 0
		}
		end := (idx + 1) * window
		if e.count+cost <= limit {
			return floodgate.Result{Allowed: true, Remaining: limit - e.count - cost, ResetAfter: dur(end - now)}
		}
		return floodgate.Result{Remaining: max(0, limit-e.count), ResetAfter: dur(end - now), RetryAfter: dur(end - now)}
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
func (e *entry) record(now int64, id string, h floodgate.Hit) {
	r := h.Rule
	cost := h.Cost
	if cost == 0 {
		cost = 1
	}
	switch r.Algorithm {
	case floodgate.TokenBucket:
		e.tat = max(e.tat, now) + cost*interval(r)
		e.expires = max(e.expires, e.tat)
	case floodgate.FixedWindow:
		e.count += cost
		e.expires = max(e.expires, (e.window+1)*int64(r.Window))
	default:
		for range cost {
			e.log = append(e.log, stamp{at: now, id: id})
		}
		e.expires = max(e.expires, now+int64(r.Window))
	}
}

// refund undoes what the take id recorded for h, once.
func (e *entry) refund(now int64, id string, h floodgate.Hit) {
	r := h.Rule
	cost := h.Cost
	if cost == 0 {
		cost = 1
	}
	if r.Algorithm == floodgate.SlidingWindow {
		e.log = slicesDeleteID(e.log, id)
		return
	}
	if _, done := e.refunded[id]; done {
		return
	}
	if e.refunded == nil {
		e.refunded = make(map[string]int64)
	}
	until := now + int64(r.Window)
	e.refunded[id] = until
	e.expires = max(e.expires, until)
	for k, t := range e.refunded {
		if t <= now {
			delete(e.refunded, k)
		}
	}
	if r.Algorithm == floodgate.TokenBucket {
		e.tat = max(now, e.tat-cost*interval(r))
		return
	}
	e.check(now, h) // moves the count to the current window
	e.count = max(0, e.count-cost)
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

// interval is a token bucket's emission interval in nanoseconds, rounded
// up so that rounding never admits more than the rule allows.
func interval(r floodgate.Rule) int64 {
	w := int64(r.Window)
	return (w + r.Limit - 1) / r.Limit
}

func dur(ns int64) time.Duration { return time.Duration(ns) }
