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
// it rejects. [Store] says which changes of a rule keep a key's count.
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
// Every call has a time budget ([Options.Timeout]); a store that fails or
// does not answer in time yields an error wrapping [ErrStoreUnavailable],
// and the caller's failure policy decides. Package httplimit does that for
// net/http (and adapters/ginlimit for gin), package breakerstore stops
// calling a dead store, and package storetest is the conformance suite
// every store passes.
package floodgate
