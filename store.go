package floodgate

import (
	"context"
	"time"
)

// Hit is one key checked against one rule: "this account, under the pix
// rule, costs 1".
type Hit struct {
	// Rule is the policy that applies; it must be valid.
	Rule Rule
	// Key identifies who is limited (an account, an IP, a route). Any bytes
	// of length 1 to MaxKeyLen are accepted; stores encode keys so that no
	// value can change where or how their state is kept.
	Key string
	// Cost is how many requests this hit counts for; zero means 1. It may
	// not exceed the rule's Capacity.
	Cost int64
}

// MaxKeyLen is the longest key a [Hit] accepts: 1 MiB. Stores keep keys
// longer than a few dozen bytes as a fixed-size digest.
const MaxKeyLen = 1 << 20

func (h Hit) cost() int64 {
	if h.Cost == 0 {
		return 1
	}
	return h.Cost
}

// Store keeps the state of the limits. Implementations must be safe for
// concurrent use, and must pass the storetest conformance suite.
//
// Every method receives hits that the Limiter has validated: valid rules,
// keys of 1 to MaxKeyLen bytes and costs of 1 to the rule's capacity.
//
// A store returns one [Result] per hit, in order. The time a store uses is
// its own (the Redis server's clock, or an injected clock): the callers'
// clocks are never trusted.
type Store interface {
	// Take checks every hit and, only if every hit is within its limit,
	// records all of them under the identifier id; otherwise it records
	// nothing. It is atomic: no concurrent Take on any of the keys may make
	// a key admit more than its limit.
	Take(ctx context.Context, id string, hits []Hit) ([]Result, error)
	// Peek reports what Take would answer now, recording nothing.
	Peek(ctx context.Context, hits []Hit) ([]Result, error)
	// Refund undoes the hits recorded by the Take with identifier id, as
	// far as they still weigh on the state. age is the time since that
	// Take was sent to the store, measured by the caller (the Limiter) on
	// its own monotonic clock, or on the store's [Clock] if it has one: the
	// take was recorded after it was sent, so it happened within the last
	// age of the store's time, and clock skew between the caller and the
	// store does not matter.
	//
	// A refund must never let a key admit more than its limit: it credits
	// only what provably remains of the take.
	//   - SlidingWindow removes the take's own entries: exact.
	//   - FixedWindow credits the take's cost only if now-age and now lie in
	//     the same window (the take is then certainly counted in the
	//     current one); otherwise nothing.
	//   - SlidingWindowCounter likewise credits the current window's count
	//     only if now-age and now share the window; otherwise nothing (the
	//     take may lie in either window, so neither is credited).
	//   - TokenBucket moves the theoretical arrival time (TAT) back by
	//     max(0, cost*T - age) (T the emission interval), not before now.
	//     The take's part of the debt is the cost*T that ends at the TAT it
	//     left, at least t+cost*T for a take at t; later takes only push the
	//     TAT on, and time pays the debt from its oldest part, so at t+age
	//     at least cost*T - age of the take's part is outstanding. Crediting
	//     no more leaves the bucket no fuller than had the take never
	//     happened. (It may credit up to the take's latency less than an
	//     exact undo would: the price of not knowing when it was recorded.)
	//
	// It is idempotent: a second Refund of the same id and hit changes
	// nothing. Stores remember a refund done for as long as a later one
	// could still credit anything (age only grows, so once the credit
	// above is zero it stays zero). A refund of an id that Take never
	// recorded must not change any count of a sliding window; other
	// algorithms may credit it, within the rules above.
	Refund(ctx context.Context, id string, hits []Hit, age time.Duration) error
	// Reset forgets all state of key under rule, as if it had never been
	// seen.
	Reset(ctx context.Context, rule Rule, key string) error
}

// Result is what a store answers for one hit.
type Result struct {
	// Allowed reports whether the hit is within its limit.
	Allowed bool
	// Remaining is how many more requests of cost 1 the key could make
	// right now (after this hit, if recorded).
	Remaining int64
	// ResetAfter is the time until the key's quota is fully available again.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed; otherwise the time until this hit
	// would be allowed.
	RetryAfter time.Duration
}

// LocalStore is an optional interface of a [Store] that keeps its state in
// the memory of the process, such as memstore's. The Limiter calls TakeOne
// for checks of a single hit ([Limiter.Allow], [Limiter.AllowN]), which
// spares the slices of Take so that a decision can allocate nothing.
//
// A store that implements LocalStore promises never to block on I/O or
// wait on anything but its own short critical sections: the Limiter gives
// its calls (all of them, not only TakeOne) no time budget
// (Options.Timeout), only the caller's context.
type LocalStore interface {
	Store
	// TakeOne is Take of the single hit h.
	TakeOne(ctx context.Context, id string, h Hit) (Result, error)
}

// Clock is an optional interface of a [Store] whose time may not be the
// system's, such as memstore with an injected clock. The Limiter measures
// the age it passes to [Store.Refund] on the store's Now when the store
// implements Clock, and on its own monotonic clock otherwise. Now must
// never go backwards; wrappers of a store should forward it.
type Clock interface {
	// Now returns the store's current time.
	Now() time.Time
}
