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
// An open breaker's error is an [*OpenError]: its RetryIn (also its
// RetryAfter method) is what is left of the cooldown, so that an HTTP layer
// can tell clients when to come back.
//
// # What counts as a failure
//
// The breaker counts only failures that the store caused. A failure is any
// error from the store, including a deadline exceeded (the limiter's time
// budget ran out), except:
//   - a cancellation by the caller (the client went away: that says nothing
//     about the store) and [floodgate.ErrClosed];
//   - a deadline that had already passed when the store was called;
//   - a deadline missed while this process was short of CPU: while the call
//     ran, some goroutine waited in the Go scheduler's run queues for at
//     least half of the call's budget (the runtime's
//     /sched/latencies:seconds histogram, read before and after the call,
//     about 0.2 µs each, no allocation).
//
// Why: a decision's budget (tens of milliseconds) is spent on the store's
// answer and on the goroutines that send it and read it. When local work
// saturates the CPUs (bcrypt on a burst of logins, a noisy neighbour),
// those goroutines wait for a CPU, the budget runs out while the store has
// long answered, and a breaker that counted those misses would open and
// fail every route for everyone because of this process's own load. Such
// a call still fails, and the route's failure mode decides it; it only
// does not move the breaker. The price: a store that is really frozen
// while the process is also starved keeps being called, and each call
// costs its budget, until the CPU recovers or the store errs outright (a
// refused connection is always counted). Bounding CPU-heavy work (the bank
// bounds concurrent password checks) keeps starvation rare.
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
