// Package breakerstore puts a circuit breaker in front of a
// [floodgate.Store], so that a dead or frozen store (a Redis that was
// killed or stopped answering) costs one short failure instead of a
// time budget per request, and is probed again until it answers.
//
// It uses github.com/sony/gobreaker/v2. The breaker is closed while the
// store answers. After [Options.Failures] consecutive failures (5 by
// default) it opens: every call fails at once with an error wrapping
// [ErrOpen] and [floodgate.ErrStoreUnavailable], and the store is not
// called. After [Options.Cooldown] it turns half-open and
// lets [Options.Probes] calls through; if they all succeed it closes, if
// one fails it opens again for another cooldown. Recovery needs no action.
//
// An open breaker's error wraps [ErrOpen], and its method RetryAfter()
// time.Duration tells what is left of the cooldown, so that an HTTP layer
// can tell clients when to come back.
//
// # What counts as a failure
//
// The breaker counts only failures that the store caused: the store must
// be down or slow for every key, not the caller hurried, one key broken,
// or this process busy. A failure is any error from the store except:
//   - a cancellation by the caller (the client went away),
//     [floodgate.ErrClosed], and [floodgate.ErrInvalidHit] or
//     [floodgate.ErrInvalidRule] (a bad call);
//   - [floodgate.ErrCorruptState]: the state of one key could not be used
//     (a value overwritten, a key of another type). That check fails, and
//     the store answered: other keys are decided as usual.
//
// A missed deadline (the Limiter's budget, [floodgate.Options.Timeout],
// ran out) is a failure only when the store had the whole budget and
// used it, which the breaker judges with three rules. It is not the
// store's when:
//   - the call started with less than half the largest budget of the
//     calls of the last 10 to 20 seconds, which is the Limiter's Timeout
//     in practice. The caller's deadline was spent, or nearly, before the
//     store was called: a request that waited for its body, a gRPC
//     deadline eaten upstream;
//   - the store answered another call while this one waited. A store that
//     answers is not down; the late calls were long (a check of many
//     keys) or stuck in this process;
//   - at least as many goroutines as there are Ps (GOMAXPROCS) waited in
//     the Go scheduler's run queues when the call started or when it
//     missed (the runtime's /sched/goroutines/runnable:goroutines, read
//     at most once a millisecond at calls' starts and after each such
//     miss: well under a microsecond, no allocation). This process was
//     short of CPU: a flood of huge requests to parse, bcrypt on a burst
//     of logins. The goroutines that send the call and read its answer
//     waited for a CPU while the store had long answered.
//
// A call judged so still fails, and the route's failure mode decides it;
// it only does not move the breaker.
//
// Why these rules, and why they hold on a saturated process. On 2 CPUs
// flooded with work, nearly every decision misses its budget while Redis
// answers each script in microseconds. Few decisions succeed, so few reset
// the count of consecutive failures: a breaker that counted those misses
// opened for everyone, and stayed open a cooldown after the flood. What
// this process measures of time is skewed by its own load, and the
// runtime's histogram of scheduling latencies samples too few waits to
// tell within one budget. The length of the run queues needs no sampling
// and no history: a saturated process holds dozens of runnable goroutines
// at every instant, an unsaturated one few. It is read at both ends of a
// call because a flood that begins or ends while a call waits leaves the
// queues long at one end only. The rules never need a call to succeed.
//
// The price. A dead or frozen store is still found at once: it answers
// nothing, its callers have whole budgets, and the count of misses that
// the rules let through is never reset, so a busy CPU only delays the
// opening by the misses it excuses (on 2 CPUs, a hung store called 5,000
// times a second opened the breaker within 100ms). But a store that
// is really slow while this process is also saturated keeps being
// called, each call costing its budget, until the CPU recovers or the
// store errs outright (a refused connection always counts). A store slow
// for some calls and fast for others is not slow. A CPU taken by other
// processes on the host shows only as far as goroutines queue behind it.
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
