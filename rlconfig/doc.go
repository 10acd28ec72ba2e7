// Package rlconfig reads rate-limit policies written in the YAML format of
// envoyproxy/ratelimit, unchanged, plus a few floodgate extensions. It
// parses and validates them ([Parse], [LoadDir]) and reloads them when
// they change ([Watch]). The [Config] it returns is what package rls
// serves as Envoy's rate-limit service, and what [NewRules] turns into
// live limits of a library's [floodgate.Limiter]. Each configured limit
// becomes a validated [floodgate.Rule].
//
// # The format
//
// A directory holds one domain per file (*.yaml or *.yml):
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number          # no value: one limit per number
//	        rate_limit:
//	          unit: day             # second, minute, hour, day, week, month, year
//	          requests_per_unit: 5
//	  - key: to_number
//	    rate_limit: {unit: day, requests_per_unit: 100}
//
// A descriptor has a key and an optional value. A value may hold "*"
// wildcards, each matching any run of characters. A descriptor without a
// value matches every value of its key, and each value is counted apart.
// A rate_limit may be unlimited, may have a name, and may replace other
// named limits (replaces). requests_per_unit: 0 denies every request. A
// descriptor may set shadow_mode (counted and reported, never denied),
// detailed_metric, value_to_metric, share_threshold (every value of a
// wildcard shares one count), quota_mode and metadata, as in
// envoyproxy/ratelimit. A key/value defined twice at one level, a domain
// in two files (unless [Options].MergeDomains), an unknown field and an
// unknown unit are refused.
//
// # Matching
//
// A request's descriptor (a list of entries, each a key and a value) is
// matched level by level: an entry matches a descriptor with its key and
// value first, then one with a matching wildcard value (in the order
// written), then one with its key and no value. The limits are those of
// the descriptor that the last entry reaches, so a request must have
// exactly as many entries as the limit is deep; a request with more
// entries than the configuration has levels matches nothing, and a
// descriptor without a rate_limit applies none. The descriptors of one
// request are matched each on its own, and then replaces applies: a named
// limit that any matched limit (an unlimited one included) replaces does
// not apply.
//
// # Extensions
//
// Each is optional. algorithm, burst and failure_mode may be set on the
// domain (the default for its descriptors), on a descriptor (the default
// for it and the descriptors nested in it) or, for algorithm and burst,
// on one limit:
//
//	domain: api
//	algorithm: sliding_window     # the whole domain counts exactly
//	failure_mode: open            # error (default), closed, open or local
//	descriptors:
//	  - key: user
//	    rate_limits:              # several limits on one key, checked together
//	      - {window: 1s, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
//	      - {window: 90s, requests_per_unit: 300}
//	      - {unit: day, requests_per_unit: 10000, algorithm: sliding_window_counter,
//	         shadow_mode: true}
//
// The extension fields:
//
//   - algorithm: fixed_window (the default, aligned to the epoch as
//     envoyproxy/ratelimit counts), sliding_window (exact),
//     sliding_window_counter or token_bucket (with an optional burst).
//   - window: any Go duration ("90s") instead of unit.
//   - rate_limits: a list of limits on one descriptor, all checked
//     together; an item may set its own shadow_mode.
//   - failure_mode: what the descriptor's limits do when the store cannot
//     decide in time; see enforce.FailureMode.
//   - count_over_limit (domain only): true counts every hit, even past its
//     limit, as envoyproxy/ratelimit counts by default: a denied request
//     extends its denial, and a charge sent after the response (Envoy
//     Gateway's costs) is recorded in full, the key owing what it took past
//     its limit, at most the limit's capacity whatever the hits_addend
//     (floodgate.Hit.Overdraw: a token bucket of 60 a minute answers
//     Retry-After 61 at most); false (floodgate's default) counts
//     only what is admitted. Unset, the service's setting applies
//     (rls.Options.CountOverLimit).
//
// # Rules and keys
//
// Each limit counts under a floodgate rule named from the domain and the
// descriptor path plus a hash of them, so the same descriptor keeps its
// rule name (and its counts) across reloads while two descriptors never
// share one. A request is counted under a key that names the domain and
// the request's entries with their values, so that different values are
// counted apart and identical ones together; a share_threshold wildcard
// level keeps its pattern instead, so all its values share one count.
// A limit is reported under its name field, or else its descriptor path
// ("messaging.message_type_marketing.to_number", with "#2", "#3"... for
// the later items of a rate_limits list).
//
// # Differences from envoyproxy/ratelimit
//
// Every file that envoyproxy/ratelimit loads and that has no mistake in
// it loads here with the same meaning. These are refused, where
// envoyproxy/ratelimit silently reads something else:
//
//   - A field at a level where it means nothing (unit on a descriptor).
//     envoyproxy/ratelimit checks names against one list for the whole
//     file and ignores a known name in the wrong place.
//   - A rate_limit without requests_per_unit. envoyproxy/ratelimit reads
//     0 and denies every request; write 0 to mean that.
//   - A file with several YAML documents; envoyproxy/ratelimit reads the
//     first.
//   - A requests_per_unit (or burst) with a fraction: the YAML decoder
//     truncates it, so envoyproxy/ratelimit reads 0.5 as 0 and denies
//     every request. 1e3 and 1000.0 are whole, and read.
//
// Keys and values are matched as pairs. envoyproxy/ratelimit joins them
// into one "key_value" string, so there key "a" with value "b_c" collides
// with key "a_b" with value "c", and a wildcard can reach across the
// underscore into the key. Files whose names start with a dot, files
// not named *.yaml or *.yml, and subdirectories are not read, where
// envoyproxy/ratelimit reads them all; [Config.Skipped] lists them (but
// the dot files), for a service to warn of. quota_mode is carried as
// written, for package rls to interpret. The per-request limit override
// of the RLS API is package rls's.
//
// # xDS
//
// The service also takes the configuration from an xDS server
// (CONFIG_TYPE=GRPC_XDS_SOTW), as envoyproxy/ratelimit does; each resource
// is read and validated as a file of this format. The proto has none of
// floodgate's extensions: they are for files only.
//
// # Reloading
//
// A [Watcher] follows a directory (or one file) through every change,
// Kubernetes ConfigMap updates and RUNTIME_ROOT swaps included; its doc
// says how. An invalid configuration is refused with every problem
// listed, and the old one stays in force.
package rlconfig
