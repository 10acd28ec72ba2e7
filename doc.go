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
// sliding-window counter). A [Decision] says whether a request may
// proceed, with what remains and when to retry; a denial is a Decision,
// never an error, and records nothing. [Limiter.Check] checks several keys
// at once (login by IP and by account), all-or-nothing; [Limiter.Refund]
// undoes what an allowed decision recorded, as far as it provably still
// weighs; [Limiter.Reset] unlocks a key; [Limiter.Wait] slows down before
// it rejects. [Store] says which changes of a rule keep a key's count.
// [Options.Overrides] gives some keys a limit of
// their own ("customer 42 gets 1000/1m"): package overrides keeps them in
// Redis, where an operator sets them from a shell.
//
// Every call has a time budget ([Options.Timeout]); a store that fails or
// does not answer in time yields an error wrapping [ErrStoreUnavailable],
// and the caller's failure policy decides. Package httplimit does that for
// net/http (and adapters/ginlimit for gin), package breakerstore stops
// calling a dead store, and package storetest is the conformance suite
// every store passes.
package floodgate
