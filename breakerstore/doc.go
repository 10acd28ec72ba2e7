// Package breakerstore puts a circuit breaker in front of a
// [floodgate.Store], so that a dead or frozen store (a Redis that was
// killed or stopped answering) costs one short failure instead of a
// time budget per request, and is probed again until it answers.
//
// It uses github.com/sony/gobreaker/v2. The breaker is closed while the
// store answers. After [Options.Failures] consecutive failures (5 by
// default) it opens: every call fails at once with an error wrapping
// [ErrOpen] and [floodgate.ErrStoreUnavailable], and the store is not
// called. After [Options.Cooldown] (5s by default) it turns half-open and
// lets [Options.Probes] calls through; if they all succeed it closes, if
// one fails it opens again for another cooldown. Recovery needs no action.
//
// A failure is any error from the store, including a deadline exceeded
// (the limiter's time budget ran out), except a cancellation by the caller
// (the client went away: that says nothing about the store) and
// [floodgate.ErrClosed].
//
// # Use
//
//	rs, err := redisstore.New(ctx, redisstore.Options{URL: url})
//	...
//	bs, err := breakerstore.New(rs, breakerstore.Options{})
//	...
//	limiter, err := floodgate.New(bs, floodgate.Options{Timeout: 30 * time.Millisecond})
//
// [Store.State] feeds a readiness probe or a metric; [Options.OnStateChange]
// reports every transition as it happens.
package breakerstore
