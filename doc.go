// Package floodgate is a rate limiter for services that run as several
// replicas: the state of the limits lives in a shared [Store] (package
// redisstore: Redis standalone, Sentinel or Cluster), so a limit holds for
// the whole fleet; package memstore keeps it in one process, with the same
// semantics.
//
//	limiter, err := floodgate.New(store, floodgate.Options{})
//	pix := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute}
//	d, err := limiter.Allow(ctx, pix, accountID)
//	if err == nil && !d.Allowed {
//		// 429: come back in d.RetryAfter
//	}
//
// A [Rule] is a policy: a name, a limit per window, an [Algorithm] (an
// exact sliding-window log by default, a token bucket, a fixed window or a
// sliding-window counter; or a limit on requests in flight, below). A
// [Decision] says whether a request may proceed, with what remains and
// when to retry; a denial is a Decision, never an error, and records
// nothing. [Limiter.Check] checks several keys
// at once (login by IP and by account), all-or-nothing; [Limiter.Refund]
// undoes what an allowed decision recorded, as far as it provably still
// weighs; [Limiter.Reset] unlocks a key; [Limiter.Wait] slows down before
// it rejects. [Limiter.Prepare] validates a rule once, when the routes
// are set up, for decisions that skip that check ([Prepared.Allow]: on a
// memory store, the fastest decision there is). [Store] says which
// changes of a rule keep a key's count.
// [Options.Overrides] gives some keys a limit of
// their own ("customer 42 gets 1000/1m"): package overrides keeps them in
// Redis, where an operator sets them from a shell.
//
// # Requests in flight
//
// A rate says how often a key may start requests; it says nothing about
// how many run at once. A slow, expensive request (a report, an export, a
// model call) costs for as long as it runs, so a rate that is safe for
// fast requests lets slow ones pile up. A [Concurrency] rule limits the
// requests in flight instead: at most Limit holders of a key at once,
// across every replica. Use a rate for what a client may ask per unit of
// time (logins, transfers), a concurrency limit for what it may keep busy
// (work that takes seconds or more, streams), and both in one
// [Limiter.Check] for "10 a second and at most 3 at once per user": a
// request denied by either records neither.
//
// An admitted Concurrency hit is a lease on a slot. Release it with
// [Limiter.Refund] when the work ends (an element of Each, for a check
// that also holds a rate's hit, which Refund would undo too); a second
// release frees nothing. The rule's Window is the lease's time to live:
// a lease that is never released (its holder died, or leaked it) frees
// its slot once its time to live runs out, and not before. Work that
// may outlast it renews the lease with [Limiter.Renew], every third of
// the time to live say, which gives it a time to live from the renewal;
// a renewal that comes after the time to live ran out fails, since the
// slot may already be another holder's. So choose the time to live as
// how long a dead holder may keep a slot, a few times longer than a
// renewal's round trip, not as the work's duration: a few seconds to a
// minute. enforce.Result.Hold renews and releases for a caller, and
// httplimit and grpclimit hold a request's leases until its handler
// returns (a stream's until it ends).
//
// A lease is an entry of a sliding-window log whose window is the time
// to live (see [SlidingWindow] for its memory), so a key holds at most
// Limit entries, 6 bytes each in Redis. A denial's RetryAfter is when the
// oldest lease's time to live runs out: the latest a slot frees, unless
// a holder releases sooner, which no store can tell ahead; denials of
// leases are never cached (Options.DenialCacheSize).
//
// # Escrow
//
// Every decision of a shared store is a round trip, and one key's
// decisions all go to the one Redis node that holds it: a hot key (a
// tenant's global limit that every replica charges) goes no faster than
// that node's core. With [Options.Escrow], a Limiter that sees a key hit
// often takes a lease of k units of its quota in one store call, decides
// up to k hits from memory until the lease ends, a Period δ later, and
// gives back what it did not use, in one Refund call for all the leases
// that ended. The fleet never admits more than the limit: a store records
// a lease ([Hit.Lease]) so that every other decision sees its units as
// taken for as long as they can be used, checked as if all k were taken
// at the grant and recorded as if all were taken at the lease's end.
//
//	limiter, err := floodgate.New(store, floodgate.Options{
//		Escrow: floodgate.Escrow{Period: 100 * time.Millisecond},
//	})
//	defer limiter.Close() // gives back the unused units
//
// Why each algorithm stays exact. Write g for the store's time of the
// grant and e = g + δ for its end; the lease's hits happen within
// [g, e], on any replica's clock, since the replica's deadline runs on
// its monotonic clock from before it sent the call, and so ends no later
// than the store's e (clocks that run at the same rate; replicas'
// clocks may disagree on the time of day, which nothing here reads).
//
//   - SlidingWindow: the k units are checked at g against the log, and
//     stamped at e (or at the log's newest time, if later: a take after a
//     lease's future stamp is stamped no earlier than it, which keeps the
//     log in order). Every admission's stamp is then at or after the time
//     it happened. Take a window (t-W, t] and the last grant or take G
//     at or before t, at time x: every admission in the window came from
//     a grant at or before x, and has its stamp after t-W, hence after
//     x-W, so G's check counted it. G admitted only what fitted its
//     limit: the window holds at most Limit. The cost is that used units
//     weigh until e + W, not their own time + W: under saturation, a key
//     admits Limit per W + δ at worst (99% of a 10 s window's, δ = 100 ms).
//   - FixedWindow: the lease is counted in the window of g and never
//     outlives it (the store cuts δ at the window's end, [Result.Lease]),
//     so every unit is used in the window that counts it.
//   - SlidingWindowCounter: as FixedWindow, the lease ends with its
//     window. Each unit, used at u in [g, e], would have been admitted by
//     a plain take at u: the previous window's weight only falls with
//     time, and every take between g and u saw the lease's k units in the
//     current count, so the count before u, plus the unit, is within
//     what the check at g allowed.
//   - TokenBucket: the k units must conform at g (as if all were taken
//     then) and the TAT moves to max(TAT, e) + k*T (as if all were taken
//     at e). The history "k at g" and the history "k at e" are both
//     conforming: every later take was checked against a TAT at least
//     what either leaves. The real admissions lie between. A span that
//     holds g is bounded as the first history bounds it (it counts all k
//     there), one that starts after g and holds e as the second does, and
//     one within (g, e) holds at most the k units and the takes after g,
//     each of which saw the TAT past e + k*T: at most Burst + span/T.
//
// Unused units go back through [Store.Refund], as a receipt of the lease's
// stamp with Cost the units unused, under its rules: a log's entries are
// removed exactly; a window's count is credited in the lease's window; a
// token bucket is credited at most k*T (a stamp after now would otherwise
// credit the lease's own wait). A Limiter skips the refunds that would
// credit nothing: a token bucket's once unused*T has passed since the
// lease's end, a window's once the window that cut the lease ended
// (measured from the grant's answer, on the Limiter's clock, so that the
// store's time is later still). A Refund of a hit decided from a lease
// gives its unit back to the lease, which may decide another hit with it;
// once the lease ended, it refunds at the store under the same rules
// (nothing, if the lease's unused units went back already: a take is
// refunded once). A replica that dies holds its unused units until their
// stamps expire, at most e + W: fewer admissions for a while, never more.
//
// Sizes. A key's first hit, or a hit after a quiet period, is a plain
// take: a cold key costs what it costs without escrow, one store call,
// with the same figures. From its second hit within a period, the
// Limiter measures its rate here and sizes a lease for one period of it,
// k = rate * δ: at most a quarter of what the store last reported left
// (of the rule's capacity, before its first answer), at most the rule's
// capacity (1,000 for a SlidingWindow, its cost bound); a lease of one
// unit is a plain take. (redisstore's group commit sends leases in one
// call with the plain takes, so a lease of 2 units already spares Redis
// work.) Near its limit a key is thus decided by plain takes, exactly as
// without escrow. A refusal that a direct limiter would not have made
// needs units held in other replicas' leases: at most what each replica
// needs for one period, and at most a quarter of what was left at its
// grant, all back within δ, or within e + W if a replica died.
//
// Figures. An allowed decision from a lease reports Remaining as the
// store's figure at the grant (with the whole lease taken) plus the
// lease's units not used yet, and ResetAfter counted down from the
// grant's answer: what this replica's direct takes would report, had no
// other replica taken since. A key denied by a plain take is denied from
// memory, with the store's figures, for a period at most (RetryAfter
// counted down from before the call was sent).
//
// What changes reach a lease, and when. A changed rule or override seen
// by the replica applies at once: a lease of another rule decides
// nothing more. A Reset through the replica drops its lease; a Reset, an
// override or a changed limit on another replica reaches this one when
// its lease ends, within δ. A lease in hand keeps deciding through a
// store outage until it ends; then the limit's failure mode applies.
// Leases are for single-hit checks ([Limiter.Allow], a Check of one hit)
// of rates: a Check of several hits, an Overdraw hit and [Concurrency]
// rules (leases of their own) go to the store. Close the Limiter to
// give back what its leases hold.
//
// Why not a Check of several hits (an RLS request of several
// descriptors). Deciding one from leases is exact when every hit's key
// holds a lease of its rule with room: all the units taken at once under
// the keys' locks, or none, each within its lease as a single hit's is.
// A check with a key short of room must then go to the store whole:
// taking the other keys' units from their leases meanwhile would use
// them at the store's answer, which may come after a lease's end. The
// cost is in getting there: keys that only ever come together would need
// a lease fetched for each key that lacks one before the check is
// decided (one call per key, since a lease is a take of one hit, and a
// wait on each key's call in flight), and a decision that refunds into
// several leases. Until that is built, such a check is one store call,
// exact, with the store's figures.
//
// Every call has a time budget ([Options.Timeout]); a store that fails or
// does not answer in time yields an error wrapping [ErrStoreUnavailable],
// and the caller's failure policy decides. Package httplimit does that for
// net/http (and adapters/ginlimit for gin), package breakerstore stops
// calling a dead store, and package storetest is the conformance suite
// every store passes.
package floodgate
