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
	// of length 1 to 1 MiB are accepted; stores encode keys so that no
	// value can change where or how their state is kept.
	Key string
	// Cost is how many requests this hit counts for; zero means 1. It may
	// not exceed the rule's Capacity, unless Overdraw is set; nor, for a
	// SlidingWindow or Concurrency rule, 100: the log keeps a time per
	// unit, so one hit holds at most 728 bytes of Redis for its window.
	Cost int64
	// Overdraw records the hit whatever the limit says, as far as the
	// algorithm can hold it, and the key owes what it took past its
	// limit: it is denied until that debt is worked off. It charges a
	// cost known only once the work is done (a response's size, the
	// tokens a model produced), as [Limiter.Settle] does. Its Cost may
	// exceed the rule's Capacity, up to 2^51 (100 for a
	// SlidingWindow rule); the key owes at most its Capacity whatever
	// the costs (below).
	//
	// In a check, the other hits stay all-or-nothing among themselves,
	// and an Overdraw hit is recorded whenever they are admitted: a check
	// of Overdraw hits alone always records. Its [Result] reports Allowed
	// as whether the hit was within the limit before it, and Remaining,
	// ResetAfter and RetryAfter as the key stands with the hit recorded
	// (RetryAfter, when past the limit, until the key admits a request of
	// cost 1 again). [Decision.Recorded] says it was recorded, and a
	// Refund undoes it as any take, within the rules of [Store.Refund].
	//
	// A key owes at most its rule's Capacity (one full quota), whatever
	// the costs (a hit of cost 2^51 would otherwise lock a token bucket's
	// key for ten years). A key in debt is then denied for at most about one
	// Window more than a key at its limit (the Capacity's refill time for
	// a TokenBucket with a Burst), as [Result.RetryAfter] reports. What a
	// key holds past its limit, and when the excess stops weighing:
	//
	//   - FixedWindow: the count holds up to twice the Limit (envoyproxy/
	//     ratelimit's counter holds any amount; a denial is the same);
	//     it is forgotten when the window ends.
	//   - SlidingWindowCounter: the current window's count holds it, up to
	//     twice the Limit (and the count c with (c+1) * Window (µs) at
	//     most 2^53: 2.5 million per hour, 100,000 per day); it weighs as
	//     that count weighs: wholly through its window, then less and less
	//     through the next (twice the Limit weighs past it until about half way).
	//   - TokenBucket: the theoretical arrival time moves on by Cost times
	//     the emission interval, up to a full bucket's refill time past a
	//     full bucket's (at most ten years): the debt is worked off at the
	//     rule's rate. For 60 a minute: Retry-After 61 s at most, the
	//     bucket full again 120 s after the hit.
	//   - SlidingWindow: the log keeps the hit's Cost times, up to the
	//     Limit (at most 100) times past its limit (6 bytes each in
	//     Redis); each weighs until it leaves the window, and the key
	//     admits a request again once fewer than Limit of its times are in
	//     the window.
	//
	// A hit that would carry a key past its bound is recorded up to the
	// bound (a log keeps its newest times, which alone decide when it
	// admits again), and the key's state starts anew, as after an expiry:
	// no refund of that hit or of an earlier one credits anything, since
	// the state no longer tells what remains of them.
	Overdraw bool
	// inForce marks a hit that [Limiter.InForce] returned: its Rule is
	// the rule in force for its Key, which a check takes as it stands.
	inForce bool
	// Lease makes a Take of this hit a lease of its Cost units for that
	// long (escrow: [Escrow]): the store checks the hit as if all its
	// units were taken now, and records them as if all were taken at
	// now+Lease, so that every other decision sees them as taken for as
	// long as the lease's holder may use them. Per algorithm:
	//
	//   - SlidingWindow: the units are stamped now+Lease (or at the log's
	//     newest time, if later, which keeps the log in order), so they
	//     weigh until now+Lease+Window; [Stamp.At] is that time.
	//   - TokenBucket: the units must conform now, and the theoretical
	//     arrival time moves to max(TAT, now+Lease) + Cost*T; [Stamp.At]
	//     is now+Lease.
	//   - FixedWindow, SlidingWindowCounter: the units are counted in the
	//     current window, as a plain take's, and the lease is cut at the
	//     window's end ([Result.Lease]): it never outlives its window.
	//
	// A lease is a Take of one hit, neither Overdraw nor of a
	// [Concurrency] rule, with Lease up to one second; the Limiter sets it
	// (callers of Check may not). Zero means a plain take.
	Lease time.Duration
}

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
// keys of 1 byte to 1 MiB and costs of 1 to the rule's capacity (to
// 2^51 for an Overdraw hit), and at most 100 for a sliding
// window.
//
// A key's state under a rule belongs to the rule's name, algorithm and
// window: rules that differ only in limit or burst share it (a changed
// limit applies at once to the count so far), and a rule with another
// window or algorithm has a state of its own, starting fresh. Take, Peek,
// Refund and Reset all follow that identity.
//
// A store returns one [Result] per hit, in order. The time a store uses is
// its own (the Redis server's clock, or an injected clock): the callers'
// clocks are never trusted.
type Store interface {
	// Take checks every hit and, only if every hit that is not Overdraw
	// is within its limit, records all of them as one take, Overdraw
	// hits past their limits included (see [Hit.Overdraw]), and names the
	// take in the stamp of every hit it recorded ([Stamp.Take]);
	// otherwise it records nothing. It is atomic: no concurrent Take on
	// any of the keys may make a key admit more than its limit. One
	// exception, which no key's limit feels: a store whose keys live on
	// several nodes (a Redis Cluster, for hits in several slots) may take
	// slot by slot and roll back the slots taken when a later one denies;
	// until the roll-back lands, a denied Take holds those reservations,
	// so concurrent Takes may be denied where they would not be, and
	// never admitted where they would not be.
	Take(ctx context.Context, hits []Hit) ([]Result, error)
	// Peek reports what Take would answer now, recording nothing.
	Peek(ctx context.Context, hits []Hit) ([]Result, error)
	// Refund undoes what Takes recorded, as far as it still weighs on the
	// state. Each [Receipt] names one hit of a Take and the [Stamp] the
	// store gave it, which alone finds the take: one call may hold
	// receipts of several Takes. The Limiter refunds every hit of an
	// allowed decision, or one of them.
	//
	// A refund must never let a key admit more than its limit: it credits
	// only what provably remains of the take. This is the one statement of
	// the proof; stores link here. With the store's time now, and the
	// take's store time At (both on the store's clock, so neither transit
	// time nor clock skew matters):
	//   - Nothing, unless the key's state is still the one the take was
	//     recorded in (its Epoch): a Reset, or the state's expiry, ends a
	//     state, and a later state never holds an earlier take.
	//   - SlidingWindow removes the take's own entries: exact.
	//   - FixedWindow credits the take's cost if At and now lie in the same
	//     window (the take is then counted in the current one); otherwise
	//     nothing.
	//   - SlidingWindowCounter likewise credits the current window's count
	//     only if At and now share the window; the previous window is never
	//     credited.
	//   - TokenBucket moves the theoretical arrival time (TAT) back by
	//     max(0, cost*T - (now-At)) (T the emission interval), not before
	//     now. The take at At left the TAT at least At+cost*T, and its part
	//     of the debt is the cost*T that ends there; later takes only push
	//     the TAT on, and time pays the debt from its oldest part, so at now
	//     at least cost*T - (now-At) of the take's part is outstanding.
	//     Crediting no more leaves the bucket no fuller than had the take
	//     never happened. A take stamped after now (a lease, [Hit.Lease],
	//     whose unused units go back before its end) is credited at most
	//     cost*T, max(0, cost*T - max(0, now-At)): its part of the debt is
	//     the cost*T that ends at its TAT, all of it outstanding while
	//     now <= At, and crediting (now-At) more than that would credit
	//     the lease's own wait, which no take paid.
	//   - A lease's unused units are refunded as a receipt of the lease's
	//     stamp with Cost the units unused (the Limiter does this once per
	//     lease): each rule above holds for them as for a take of that
	//     cost at At, since the lease recorded them as such.
	//
	// It is idempotent: a second Refund of the same receipt changes
	// nothing, whatever happened to the key in between. Stores remember a
	// refund done for as long as a later one could still credit anything
	// (now only grows, so once the credit above is zero it stays zero). A
	// receipt that Take never gave credits nothing.
	Refund(ctx context.Context, receipts []Receipt) error
	// Reset forgets all state of key under rule, as if it had never been
	// seen.
	Reset(ctx context.Context, rule Rule, key string) error
	// Renew extends leases: for each receipt of a Concurrency hit whose
	// entries still hold their slots (the state is the take's, its time
	// At is in the window, and it was not refunded), it moves them to the
	// store's time now, atomically, so the key's count never changes, and
	// returns the receipt's new stamp (its Epoch and Take unchanged). A
	// receipt that no longer holds (or is not of a Concurrency hit) renews
	// nothing, and gets the zero Stamp: its slot may already be another
	// holder's, and a renewal never takes one back. A later Refund or
	// Renew of the lease passes the newest stamp.
	//
	// A sliding-window log finds a lease's entries as Refund finds a
	// take's: the Cost oldest at or after At. Every lease held can be
	// matched to entries of the log no older than its stamp's At (its
	// own, to begin with), and removing the oldest entries at or after At
	// keeps such a matching: a holder whose entries were taken is matched
	// to the lease's, which are no older. So a renewal or a release with
	// the newest stamp removes the lease's own entries or entries of its
	// instant, and the count stays exact; one with an older stamp (after
	// a renewal whose answer was lost) never lets the log count fewer
	// leases than are held: at worst a slot stays taken until a later
	// entry's time to live runs out. Each lease must be released at most
	// once: Refund's idempotence sees to it.
	Renew(ctx context.Context, receipts []Receipt) ([]Stamp, error)
}

// Result is what a store answers for one hit.
type Result struct {
	// Allowed reports whether the hit is within its limit. An Overdraw
	// hit past its limit is recorded all the same (see [Hit.Overdraw]).
	Allowed bool
	// Remaining is how many more requests of cost 1 the key could make
	// right now (after this hit, if recorded). It is negative when the
	// key holds more than its limit: minus what it owes (a debt of
	// Overdraw hits, or a limit lowered since), rounded up to whole
	// requests.
	Remaining int64
	// ResetAfter is the time until the key's quota is fully available again.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed; otherwise the time until this hit
	// would be allowed (for an Overdraw hit, recorded past its limit: until
	// a request of cost 1 would be).
	RetryAfter time.Duration
	// Stamp is all Refund and Renew need to find the hit again: set by
	// Take for a hit it recorded, zero otherwise.
	Stamp Stamp
	// Lease is, for an allowed hit with [Hit.Lease] set, how long its
	// holder may use the lease from the store's time of the take: Hit.Lease,
	// cut at the end of the current window for a FixedWindow or
	// SlidingWindowCounter rule. Zero otherwise.
	Lease time.Duration
}

// Stamp is a store's mark on a hit it recorded: when, and in which state
// of the key. The Limiter keeps it in the Decision and hands it back to
// [Store.Refund].
type Stamp struct {
	// At is the store's time when it recorded the hit.
	At time.Time
	// Epoch names the state of the key that recorded the hit. A store
	// gives every new state of a key (the first take after the key was
	// empty, reset or expired) an epoch that no earlier state of that key
	// had, and never zero: memstore counts them from a random start per
	// shard (so that another store's stamps match its own by chance
	// alone); redisstore hashes the name of the take that creates the
	// state into 48 bits, so two states of one key share an epoch with a
	// chance of about 2^-48. Zero means no state: a stamp no Take gave,
	// which credits nothing.
	Epoch uint64
	// Take is the store's own name for the take that recorded the hit,
	// opaque to callers and never zero for a recorded hit: no other take
	// of that state has it (memstore counts the hits each state recorded;
	// redisstore names each Take call, and all its hits share the name).
	// Refund and Renew find the take by it.
	Take uint64
}

// Receipt is one hit of a Take, with the stamp the store gave it: what
// [Store.Refund] undoes.
type Receipt struct {
	Hit   Hit
	Stamp Stamp
}

// LocalStore is an optional interface of a [Store] that keeps its state in
// the memory of the process, such as memstore's. The Limiter calls TakeOne
// for checks of a single hit ([Limiter.Allow], [Limiter.Check]), which
// spares the slices of Take so that a decision can allocate nothing.
//
// A store that implements LocalStore promises never to block on I/O or
// wait on anything but its own short critical sections: the Limiter gives
// its calls (all of them, not only TakeOne) no time budget
// (Options.Timeout), only the caller's context.
//
// A LocalStore may also have a method
//
//	TakeFunc(rule Rule) func(ctx context.Context, key string) (Result, error)
//
// that returns TakeOne of a hit of cost 1 under rule (valid) as a
// function of its key, computing once what the rule alone makes of each
// take: [Limiter.Prepare] calls it once per rule it prepares, on a
// Limiter without overrides, escrow or the denial cache (memstore's
// Store has it).
type LocalStore interface {
	Store
	// TakeOne is Take of the single hit h.
	TakeOne(ctx context.Context, h Hit) (Result, error)
}
