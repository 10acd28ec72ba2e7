// Package algo holds what the stores compute the same way for each
// algorithm, once: the token bucket's emission interval, and how long a
// take weighs on a key's state. memstore computes with them in Go;
// redisstore passes them to its Lua scripts, which keep the only other
// copy of the formulas (take.lua, refund.lua). What a refund credits is
// stated once, on floodgate.Store.Refund.
package algo

import (
	"time"

	"github.com/floodgate-rl/floodgate"
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
// token bucket takes to refill the cost.
func Life(r floodgate.Rule, cost int64) time.Duration {
	switch r.Algorithm {
	case floodgate.TokenBucket:
		return time.Duration(cost) * Interval(r)
	case floodgate.SlidingWindowCounter:
		return 2 * r.Window
	default:
		return r.Window
	}
}
