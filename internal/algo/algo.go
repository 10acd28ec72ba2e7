// Package algo holds what the stores compute the same way for each
// algorithm, once: the token bucket's emission interval, and how long a
// take weighs on a key's state. memstore computes with them in Go;
// redisstore passes them to its Lua scripts, which keep the only other
// copy of the formulas (take.lua, refund.lua). What a refund credits is
// stated once, on floodgate.Store.Refund.
package algo

import (
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Interval is a token bucket's emission interval, Window/Limit, rounded
// up to a whole microsecond: rounding never admits more than the rule
// allows, and the stores that count in microseconds (Redis) and in
// nanoseconds (memstore) agree. floodgate.Rule.Validate bounds Limit,
// Burst and Window so that Capacity times Interval stays below 2^52µs.
func Interval(r floodgate.Rule) time.Duration {
	w := int64(r.Window / time.Microsecond)
	return time.Duration((w+r.Limit-1)/r.Limit) * time.Microsecond
}

// Life is the longest time a take of cost can weigh on a key's state
// under r: a window for a sliding window or a fixed window, two for a
// sliding-window counter (the next window weighs it too), and the time a
// token bucket takes to refill the cost (at most Ahead past a full
// bucket's, for an Overdraw hit: twice a full bucket's refill time).
func Life(r floodgate.Rule, cost int64) time.Duration {
	switch r.Algorithm {
	case floodgate.TokenBucket:
		t := Interval(r)
		most := time.Duration(r.Capacity())*t + Ahead(r)
		if cost > int64(most/t) {
			return most
		}
		return time.Duration(cost) * t
	case floodgate.SlidingWindowCounter:
		return 2 * r.Window
	default:
		return r.Window
	}
}

// What a key's state holds past its limit, for floodgate.Hit.Overdraw,
// which states the bounds and what happens past them: a debt of at most
// the rule's capacity (one full quota), whatever the costs. A key in debt
// is then denied for at most about one window more than a key at its
// limit: a token bucket works its debt off at the rule's rate (Capacity
// times Interval, a Window at the default burst), a fixed window forgets
// it at its end, a sliding-window counter's count of twice its limit
// weighs past the limit until about half way through the next window, and a log's
// times leave with the window. (A bound of ten years let one hit of cost
// 2^51 lock a token bucket's key for ten years.) memstore computes with
// these; take.lua keeps the only other copy.

// MaxCount is the most a fixed window under r counts: twice its limit,
// at most 2^52, exact in Lua's doubles with a cost of up to bounds.Limit
// (2^51) added.
func MaxCount(r floodgate.Rule) int64 { return 2 * r.Limit }

// Ahead is how far past a full bucket's a token bucket's theoretical
// arrival time may run under r: a full bucket's refill time (Capacity
// times Interval), at most bounds.Window. With a full bucket's refill
// time (at most 2^51µs under Rule.Validate's bounds) and the server time
// (below 2^52µs), it stays below 2^53µs.
func Ahead(r floodgate.Rule) time.Duration {
	return min(time.Duration(r.Capacity())*Interval(r), bounds.Window)
}

// CounterMax is the most a sliding-window counter under r counts in one
// window: twice its limit, and at most the count c with (c+1) * Window at
// most 2^53µs, where Lua's doubles and memstore's nanoseconds stay exact.
// It is at least r's limit (Rule.Validate).
func CounterMax(r floodgate.Rule) int64 {
	return min(2*r.Limit, 1<<53/int64(r.Window/time.Microsecond)-1)
}

// LogMax is the most times a sliding-window log under r keeps: its limit
// and as many more, at most bounds.SlidingCost more (the most one hit
// records).
func LogMax(r floodgate.Rule) int64 { return r.Limit + min(r.Limit, bounds.SlidingCost) }

// MaxCost is bounds.MaxCost of h: the highest cost it may have. The
// Limiter validates the same (floodgate.Hit.Overdraw); the stores check
// it again for their own callers.
func MaxCost(h floodgate.Hit) int64 {
	a := h.Rule.Algorithm
	return bounds.MaxCost(h.Rule.Capacity(), a == floodgate.SlidingWindow || a == floodgate.Concurrency, h.Overdraw)
}

// MaxLease is the longest lease a store grants ([floodgate.Hit.Lease]).
const MaxLease = time.Second

// LeaseError reports why hits cannot be a Take with a lease, or nil:
// a lease is a Take of one hit, neither Overdraw nor of a Concurrency
// rule, of a positive Lease up to MaxLease, in whole microseconds. Hits without a lease are
// nil's.
func LeaseError(hits []floodgate.Hit) error {
	for i, h := range hits {
		switch {
		case h.Lease == 0:
			continue
		case len(hits) != 1:
			return fmt.Errorf("%w: hit %d of %d has a lease; a lease is a take of one hit", floodgate.ErrInvalidHit, i, len(hits))
		case h.Lease < 0 || h.Lease > MaxLease || h.Lease%time.Microsecond != 0:
			return fmt.Errorf("%w: lease %v is not a whole number of microseconds within 0 to %v", floodgate.ErrInvalidHit, h.Lease, MaxLease)
		case h.Overdraw || h.Rule.Algorithm == floodgate.Concurrency:
			return fmt.Errorf("%w: a lease may not be Overdraw or of a concurrency rule", floodgate.ErrInvalidHit)
		}
	}
	return nil
}

// LeaseOf is the Result.Lease of an allowed take of h at the store's
// time now (ns, on the store's clock): h.Lease, cut at the end of the
// current window for a fixed window or a sliding-window counter, whose
// count belongs to that window. Both stores compute it here.
func LeaseOf(h *floodgate.Hit, now int64) time.Duration {
	switch h.Rule.Algorithm {
	case floodgate.FixedWindow, floodgate.SlidingWindowCounter:
		w := int64(h.Rule.Window)
		idx := now / w
		if now%w != 0 && now < 0 {
			idx--
		}
		return min(h.Lease, time.Duration((idx+1)*w-now))
	}
	return h.Lease
}
