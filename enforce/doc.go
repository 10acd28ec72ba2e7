// Package enforce is floodgate's transport-neutral enforcement layer: what
// every transport needs around a [floodgate.Limiter] to serve requests
// safely. It decides a request's hits all-or-nothing within the limiter's
// time budget, keeps serving by each hit's [FailureMode] when the store
// fails (closed, open, or local: per-replica in-memory limits), throttles
// (waits before it rejects), checks shadow limits without letting them
// deny, counts everything in Prometheus metrics and logs degraded
// decisions in aggregate, never one line per request. Every transport
// reports a [Result]'s figures through one report builder
// (internal/report): the draft-ietf-httpapi-ratelimit-headers-11 fields
// RateLimit-Policy and RateLimit, with Retry-After over HTTP and a
// RetryInfo detail over gRPC, and Envoy's descriptor statuses from the RLS
// service, which adds the fields on request.
//
// httplimit (net/http), grpclimit (gRPC interceptors) and the rls
// service (Envoy's rate-limit API) are thin adapters over it: they turn a
// request into keys and a [Result] into an answer. A process that serves
// several transports shares one [Enforcer], so that its metrics are
// registered once and one rule name means one rule everywhere. Any other
// caller of the core gets the same failure modes and metrics from it:
//
//	e, err := enforce.New(enforce.Options{Limiter: limiter, Registerer: prometheus.DefaultRegisterer, Logger: logger})
//	...
//	jobs, err := e.Gate(enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: perTenant}}, Failure: enforce.FailOpen})
//	...
//	res, err := jobs.Check(ctx, jobs.Hits(ctx, []string{tenant}))
//	if err != nil { return err } // ctx is done, or a hit is invalid: the zero Result is no verdict
//	if !res.Allowed() { ... retry after res.Decision.RetryAfter }
//
// # One pass per request
//
// A transport hands [Gate.Check] every hit of a request at once and reports
// its [Result] as it is: whether the request may proceed, and in
// [Result.Each] the final verdict on each hit, under the rule in force for
// its key. A hit is a take, a peek ([Hit.Peek]: never recorded) or one
// that can never be admitted ([DenyOversize]: denied without asking);
// enforced or shadow; with its failure mode. The store is asked as few
// times as its contract allows (a Take records every hit it admits, a
// Peek none): [Gate.Check] counts the calls.
//
// # Failures of the store
//
// Every decision has the time budget of the floodgate.Limiter
// (floodgate.Options.Timeout). A store that fails or does not
// answer in time is handled by the failure mode: [FailLocal] (the
// default of HTTP routes and gRPC methods) decides with per-replica
// in-memory limits, [FailClosed] denies, [FailOpen] allows, [FailError]
// decides nothing and lets the caller answer an error (the default of
// RLS descriptors: Envoy's failure_mode_deny chooses); the strictest mode
// of a check's hits decides. A Redis store guards itself with a circuit
// breaker by default, but on a Cluster (redisstore.Options.Breaker says
// why), and a breakerstore does
// the same in front of any other: a dead store costs nothing once its
// breaker is open, and it is probed and taken back by itself. A
// fail-closed denial should ask the client to wait
// [Result.FailRetryAfter]: 5s, or the breaker's remaining open time if
// that is longer. Each degraded decision is counted, and logged at most
// once per gate every 5s, each line saying how many more it stands for
// (suppressed: the gate's degraded decisions of any failure mode; the
// line names the latest one's mode and outcome). A decision that ran
// out of time against a frozen store may still be recorded when the
// store wakes (it was sent, and is not taken back: see redisstore's
// doc), so a request that its failure mode let through can count against
// its key after the fact.
//
// # Requests in flight
//
// A gate whose limits include a floodgate.Concurrency rule admits a
// request with a lease on a slot: [Result.Hold] keeps it renewed while
// the request runs and releases it when the request ends (httplimit and
// grpclimit call it). A throttling gate (Spec.MaxDelay) denied by
// concurrency limits alone waits for a slot: a release in this process
// wakes it, another process's is seen at its next check, an eighth of
// MaxDelay later at most (within 10ms and 250ms). With the store down,
// FailLocal counts the holders of each replica in its local limits.
//
// # Metrics
//
// With [Options.Registerer] set, New registers (gate is the Spec's Name:
// an HTTP route, a gRPC method, an RLS domain):
//
//	floodgate_decisions_total{gate,policy,outcome}  outcome: allowed, denied, failed_open, failed_closed, local, skipped,
//	                                                error, and shadow_allowed, shadow_denied for shadow limits
//	floodgate_skipped_limits_total{gate,policy}     limits skipped for want of a key
//	floodgate_store_duration_seconds{gate}          histogram of the store's decision time
//	floodgate_store_errors_total{gate,reason}       reason: timeout, breaker_open, full, corrupt_state, error
//	floodgate_throttled_total{gate,result}          result: allowed, denied, rejected, canceled
//	floodgate_throttle_waiting{gate}                requests waiting now
//	floodgate_breaker_state                         0 closed, 1 half-open, 2 open (with Options.Breaker)
//	floodgate_leases_held{gate,policy}              leases of concurrency limits held by this process now
//	floodgate_leases_expired_total{gate,policy}     leases whose time to live ran out before their release (or whose key was reset)
//	floodgate_lease_renewals_failed_total{gate,policy}  renewals that failed (store failed, or lease gone)
//
// floodgate_decisions_total counts each request once, under the policy
// its decision reports (floodgate.Decision.Policy: of a check of several
// limits, the worst), or under the empty policy when no limiter decided
// (a failed store, every limit skipped): a request checked against an IP
// limit and an account limit adds one to one of them, not one to each.
// A request of shadow limits only is counted by their own decisions
// (shadow_allowed, shadow_denied), or failed_open when the store failed
// before it decided any of them, and then logged with the degraded
// decisions.
// Each limit's own figures are in the answer's fields (RateLimit) and in
// the store ("floodgate peek").
//
// A gate's policy label values are the names its hits are reported under
// (a hit's Policy, or its rule's name): its Spec's, and those of the
// rules that come with the requests ([Gate.Check]) up to
// 1,000 of them; the rest are counted under "(other)", so
// that no client input creates series without bound.
package enforce
