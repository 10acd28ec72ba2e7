// Package rlqs is the Rate Limit Quota Service (RLQS) for Envoy's
// rate_limit_quota HTTP filter (envoy.service.rate_limit_quota.v3,
// StreamRateLimitQuotas). Each Envoy enforces an assignment locally (a
// token bucket, or allow-all / deny-all) and streams usage reports; the
// service answers with assignments that are leases of shares of a
// fleet-wide limit, recorded in a [Ledger] that every replica shares
// ([RedisLedger]), so that several replicas serving different Envoys never
// hand out more than the limit between them.
//
// # Buckets and limits
//
// A bucket id (the map the filter's bucket_id_builder produces) is matched
// like an RLS descriptor, against the same envoyproxy/ratelimit YAML that
// package rls serves ([Options.Config] is rls.Server.Config, so files and
// xDS both apply): the domain is the stream's (the domain field of its
// first report, RateLimitQuotaUsageReports.domain, as the protocol says),
// and the entries are the map's key/value pairs sorted by key. A bucket
// {"route": "api", "tenant": "acme"} is the descriptor
// [(route, api), (tenant, acme)]: write its levels in key order. Of the
// limits matched, the one of lowest rate that may deny assigns; a limit in
// shadow or quota mode, an unlimited one, no match and an unknown domain
// are allow-all (as RLS answers OK), a limit of 0 deny-all. A bucket that
// was limited and is no longer configured gets an abandon_action: Envoy
// drops it and goes back to its no_assignment_behavior.
//
// # Shares, footprints and the token bucket
//
// A share s of a limit of L per window W is a token bucket refilling
// s/W continuously (tokens_per_fill s per fill_interval W) that holds
// burst(s) = max(2, s/50 rounded up) tokens. Envoy starts each new
// (different) token bucket full, so in any window W such an assignment
// admits at most s + burst(s), and one more burst(s) when the assignment
// changes within the window: the ledger counts its footprint
// s + 2·burst(s). An assignment re-sent unchanged keeps Envoy's bucket,
// and a fair share within 2% of the one in force re-grants it, so shares
// change rarely once demand is steady.
//
// # Invariant
//
// For every bucket and every instant t, the footprints of the grants that
// can be in force at t sum to at most the capacity L. A grant is in force
// from its delivery until its TTL after delivery; the ledger counts it
// from before it is sent until TTL+Grace after the ledger's clock read at
// the grant, where Grace bounds the delivery (a stream whose Send takes
// longer is ended). A holder's later grant does not cancel an earlier one
// in the ledger: Envoy keeps enforcing the old assignment until it
// receives the new one or the old TTL runs out, so a holder counts as the
// largest of its grants not yet expired.
//
// Argument: held_h(t), the largest unexpired grant of holder h, can only
// fall as t grows, until h is granted again. A grant to h at t0 is
// g = min(fair, L − Σ_{k≠h} held_k(t0)), computed atomically (one Lua
// script in Redis, a mutex in memory, on one clock). For t in
// [t0, t0+TTL+Grace): Σ_{k≠h} held_k(t) ≤ Σ_{k≠h} held_k(t0) ≤ L − g, and
// h's own count is max(g, its older grants), which were within the
// invariant when granted; so the sum stays at most L. A share therefore
// moves only by being lowered first: a holder whose fair share fell is
// granted less at once, but its older, larger grant keeps counting until
// its TTL, and only then can another holder be raised into it. Grants are
// never retried on error, so a lost reply only under-admits.
//
// The invariant bounds what the assignments allow; what Envoy admits in
// any window W is at most the sum of the footprints, so at most L. The
// assumptions: Envoy's no_assignment_behavior and
// expired_assignment_behavior deny (a fallback that allows, or
// reuse_last_assignment, admits outside the ledger: docs/SERVICE.md gives
// the configuration), an assignment reaches Envoy within Grace or never,
// and the limit does not shrink (a lowered limit holds within TTL+Grace,
// once the grants against the old one have expired).
//
// # Fair shares
//
// Each holder (one stream's view of one bucket) claims its demand: the
// requests it reported (allowed plus denied) per window, measured over the
// report's time_elapsed, as a footprint. The ledger divides the capacity
// max-min fairly over the live claims: the smallest are met in full and
// the rest split equally, so an Envoy using less than its share frees the
// rest for the others. A new Envoy, before its first measured report,
// claims an equal split of the capacity among the bucket's holders, out of
// what is free: the others' fair shares leave such a provisional claim
// out, so that nobody's share is lowered for a demand nobody measured. A
// provisional share lives one Refresh and two StoreTimeouts, and is renewed
// every Refresh/4 until the Envoy's first measured report; a holder short
// of its fair share (others' larger grants still counting) asks again
// every Refresh/4 too. A stream that ends withdraws its claims at once (its grants
// count until they expire); a silent one's claim lapses after TTL+Grace.
//
// # Failures
//
// A ledger call that fails (a Redis outage, its 100ms StoreTimeout) sends
// nothing: the assignment in force stays. Once it would expire before the
// next round and that round's failed call (two StoreTimeouts and one and a
// half rounds before its TTL runs out), the limit's failure_mode decides,
// in time for Envoy never to see it expire: closed
// assigns deny-all and open allow-all (each for one TTL, renewed while the
// outage lasts), local a token bucket of the whole limit split among this
// replica's streams of the bucket (the replicas together admit up to
// their number times the limit, as every local failure mode), and error
// (RLS's default) sends nothing, so Envoy's expired_assignment_behavior
// decides. The next successful grant returns to shares. A round that
// meets a failing ledger does not call it again for its other buckets, so
// a frozen Redis costs a stream one StoreTimeout per round, whatever its
// buckets.
//
// # Bounds
//
// A stream tracks at most 1024 buckets of at most 64 entries and 4 KiB
// each; the reports of more are ignored and counted
// (floodgate_rlqs_buckets_refused_total), and Envoy applies its
// no_assignment_behavior to them. Counts are read up to 2^40 and demand
// up to the limit, so an absurd report claims the limit and no more. A
// client that does not read its assignments is disconnected once a Send
// has waited Grace (floodgate_rlqs_slow_clients_total); each stream has
// its own goroutines, so none waits for another. A bucket in Redis is one
// hash of about 60 bytes per holder, expiring with its last grant.
//
// # Metrics
//
// floodgate_rlqs_requests_total{limit, result} counts the reported
// requests (allowed, denied) by the limit's label (never a bucket's
// values), floodgate_rlqs_assignments_total{kind} the actions decided,
// floodgate_rlqs_streams the streams open and
// floodgate_rlqs_store_errors_total the failed ledger calls.
package rlqs
