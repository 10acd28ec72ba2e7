// Package rls serves floodgate's limits as Envoy's rate-limit service
// (RLS v3, envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit),
// a drop-in for envoyproxy/ratelimit: the same YAML configuration
// (package rlconfig), the same gRPC API and the same POST /json. A
// [Server] decides through an [enforce.Enforcer], so it has the failure
// modes, local fallback, breaker, metrics and logs of every other
// floodgate transport. cmd/floodgate runs it; docs/SERVICE.md tells how
// to switch from envoyproxy/ratelimit.
//
// # A request
//
// Each descriptor of a request is matched against its domain's
// configuration (as package rlconfig states: the most specific
// match, replaces applied). Every limit that applies counts the
// descriptor's hits_addend (the descriptor's, else the request's, else
// 1) under a key made of the domain and the descriptor's entries. Then:
//
//   - All descriptors are checked together, all-or-nothing: when one is
//     over its limit, the answer is OVER_LIMIT and nothing is recorded
//     on any of them. (envoyproxy/ratelimit records the others.)
//   - Identical descriptors in one request count together: two of them
//     with a hits_addend of 1 count 2.
//   - A descriptor hits_addend of 0 is a peek: it asks whether one more
//     hit would be allowed now and records nothing. A peek that would be
//     denied makes the request OVER_LIMIT.
//   - A shadow_mode limit is counted and reported, and never denies. In
//     a request that another descriptor denies, it is not evaluated (a
//     store call for a verdict that changes nothing, on the path a flood
//     takes): its status has no figures and its hit counts in total_hits
//     alone.
//     [Options.ShadowMode] makes every limit one, limit overrides
//     included (envoyproxy/ratelimit's SHADOW_MODE).
//   - A descriptor's limit override (Envoy's rate limit action with a
//     limit) replaces what the configuration says of it, as in
//     envoyproxy/ratelimit: a fixed window of requests_per_unit per unit
//     (times unit_multiplier), in a configured domain. Its limit and
//     window name its state, so two overrides of one descriptor in one
//     request are two limits, each checked. All of a domain's overrides
//     are reported under one name, "<domain>.override", so that no client
//     makes metric series.
//   - A hits_addend that the limit in force (after a key's override)
//     could never admit (beyond its capacity,
//     or beyond 100 for a sliding window) is over
//     that limit without asking the store, as envoyproxy/ratelimit
//     answers it; not an error, which Envoy's filter lets through by
//     default (failure_mode_deny: false), while a hits_addend may come
//     from a request header.
//   - requests_per_unit: 0 denies without counting; unlimited allows
//     without counting; a descriptor that matches no limit, or a domain
//     that is not configured, is OK (the latter counted in
//     floodgate_rls_unknown_domain_total).
//
// A limit is reported under its name (its name field, or else its
// descriptor path, as package rlconfig states) in the RateLimit fields
// and every metric, with the figures of the rule in force (a key's
// override included). current_limit.name is the name field alone, empty
// for a limit without one, as envoyproxy/ratelimit sends it.
// detailed_metric labels the floodgate_rls_* series with the request's
// values; past 1,000 distinct values, new ones are counted under
// "(other)".
//
// The response has one status per descriptor, in the request's order:
// its code (OVER_LIMIT when one of its own limits denied), and the
// figures of its worst limit: current_limit (name, requests_per_unit and
// unit; a window extension is written as the longest unit that divides
// it with unit_multiplier, 90s as 90 SECOND, or UNKNOWN when no unit
// divides it), limit_remaining and duration_until_reset (until the
// quota is whole again, in whole seconds rounded up, as
// envoyproxy/ratelimit answers it). A descriptor over the limit of a
// request that recorded nothing reports the quota it keeps; its other
// enforced descriptors report theirs as now. response_headers_to_add
// carries the headers that [Options.Headers] asks for: none by default,
// as upstream.
//
// # When the store fails
//
// Each decision has the Enforcer's limiter's time budget. When the store
// fails or does not answer in time, each descriptor takes its
// failure_mode: error (the default) answers the gRPC error Unavailable,
// so that Envoy's failure_mode_deny decides, as with envoyproxy/ratelimit
// but within the budget instead of a stall; closed answers OVER_LIMIT
// with a Retry-After of at least 5s; open
// answers OK; local decides with the instance's own in-memory limits.
// In a request with several modes the strictest decides: closed, then
// error, then local, then open. A peek that the store cannot answer takes
// the same modes (local peeks at the instance's own limits); the other
// descriptors of its request then take their modes too, without asking
// the store again, so that the request waits one budget at most. A
// shadow_mode limit takes open.
//
// Only measured figures are reported. A descriptor that the failure mode
// closed denied has its current_limit, limit_remaining 0 and a
// duration_until_reset of the Retry-After, in whole seconds, so that
// Envoy's x-ratelimit headers say what Retry-After says. One that the
// store did not decide and that was let through (open, a shadow_mode
// limit, or the other descriptors of a request that failed closed) has
// no current_limit, limit_remaining or duration_until_reset: Envoy then
// leaves it out of its x-ratelimit headers, instead of reading an
// exhausted quota. Neither has a member in RateLimit-Policy or
// RateLimit; local reports the local limits' figures, as the store's.
// A request of shadow_mode limits only is counted failed_open in
// floodgate_decisions_total and logged with the degraded decisions, as
// every other request that a failure mode decided.
//
// # Input that cannot be decided
//
// InvalidArgument, with the reason, answers an empty domain, no
// descriptors, a descriptor without entries or with an empty key, more
// than 256 descriptors or 64 entries, a
// limit override without a unit, and is_negative_hits (unsupported). A
// message over 1 MiB is refused by gRPC (ResourceExhausted)
// and by /json (413).
//
// # Configuration and reload
//
// [Options.ConfigDir] is watched ([rlconfig.Watcher], including the
// ..data symbolic link swap of a Kubernetes ConfigMap, read one version
// whole, and a swapped link on the directory's path): a new
// configuration is read once the directory has been quiet (with
// [rlconfig.WatchOptions.Debounce]'s default), validated whole and swapped in atomically, so a
// request sees one configuration; an invalid one is refused, logged and
// counted, and the old one stays. What the directory holds and is not
// read (files not named *.yaml or *.yml, subdirectories) is logged as a
// warning at each load and listed by /rlconfig.
//
// # Metrics
//
// Besides the Enforcer's (floodgate_decisions_total and the rest, with
// the domain as gate), a Server registers, labelled by domain, limit (the
// limit's name, or its descriptor path) and descriptor (the request's
// values, only where detailed_metric asks, so that labels stay bounded):
//
//	floodgate_rls_total_hits_total     hits that reached a limit (hits_addend summed)
//	floodgate_rls_over_limit_total     hits that a limit evaluated and found over it
//	floodgate_rls_near_limit_total     hits that took a limit above floor(limit × Options.NearLimitRatio (80%)), up to the limit
//	floodgate_rls_within_limit_total   hits that a limit evaluated and found within it
//	floodgate_rls_shadow_mode_total    hits over a shadow_mode limit, let through
//
// As envoyproxy/ratelimit counts: every hit of a descriptor that matched
// a limit counts in total_hits, whatever decided it (peeks add their 0).
// A hit that its limit evaluated, through the store or the local limits,
// also counts in within_limit or over_limit, by what the limit said of
// it, whether or not it was recorded: the OK descriptors of a request
// denied as a whole are within their limits, though nothing was
// recorded (envoyproxy/ratelimit records them). A hit that the store did
// not evaluate, decided by a failure mode (error, closed, open) or shed,
// counts in total_hits alone; floodgate_decisions_total says how the
// request was decided, and what was recorded. Of several hits at once
// (hits_addend) that cross the near threshold or the limit, only those
// past it count in near_limit, over_limit and shadow_mode, and an over
// request's hits between the threshold and the limit count as near, in
// envoyproxy/ratelimit's arithmetic.
//
// and floodgate_rls_requests_total{code}, floodgate_rls_unknown_domain_total,
// floodgate_config_load_success_total,
// floodgate_config_load_error_total (a reload of ConfigDir that finds no
// file is one, unless Options.AllowEmptyConfig) and
// floodgate_config_load_dropped_total (configurations put in force that
// dropped a domain, or every limit, each logged at WARN).
package rls
