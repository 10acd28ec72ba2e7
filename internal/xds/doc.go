// Package xds takes the rate-limit configuration from an xDS server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW, and as Envoy
// Gateway serves it to its rate-limit deployment.
//
// A [Client] opens one aggregated (ADS) stream, state of the world, to
// the server and subscribes to every resource of type
// [TypeURL] (ratelimit.config.ratelimit.v3.RateLimitConfig) for its node.
// Each response is a whole configuration: every resource is turned into
// a file of rlconfig's format ([Update].Files) and the set is validated
// by [rlconfig.Parse], as a directory of files is, so a resource is
// valid exactly when its file is. A valid one is handed to
// [Options].Apply, which puts it in force, and is then acknowledged
// (ACK: the response's version and nonce). An invalid one, or one Apply
// refuses, is rejected (NACK: the version in force, the response's
// nonce and the reason in error_detail) and the configuration in force
// stays.
//
// # Failures
//
// A lost server, or one that cannot be reached, changes nothing: the
// configuration in force stays until the server returns. The Client
// opens a new stream after a pause that grows with each failed attempt
// ([Backoff]), asks again for the version it holds, and takes what the
// server sends.
//
// A server built on go-control-plane's snapshot cache answers a NACK by
// sending the same snapshot again at once, for as long as it holds it.
// The Client rejects a snapshot it has already rejected without reading
// it again, after a pause held before the NACK (100ms, 200ms, ... 6.4s,
// then 10s each time: the doubling is cut at 10s; the first rejection of
// a snapshot has none), so that the exchange does not spin; a changed snapshot is read at once, and a
// fixed one waits at most that pause. The rejections are counted
// (floodgate_xds_nacks_total) and logged at most once every 30s, each
// line with the reason and how many rejections it stands for.
//
// # Metrics
//
//   - floodgate_xds_connected: 1 while a stream to the server is open.
//   - floodgate_xds_config_info{version}: 1, labelled with the version
//     of the configuration in force (the server's version_info).
//   - floodgate_xds_acks_total, floodgate_xds_nacks_total: responses
//     accepted and rejected.
//
// # What the proto carries
//
// A resource carries what envoyproxy/ratelimit's proto has: key, value,
// rate_limit (unit, requests_per_unit, unlimited, name, replaces),
// nested descriptors, shadow_mode, detailed_metric, and, from newer
// versions of the proto than the one compiled in, quota_mode, metadata
// and the units week, month and year. floodgate's extensions to the YAML
// format (algorithm, burst, window, rate_limits, failure_mode) have no
// field there, so they exist in files only: a configuration from xDS
// counts as envoyproxy/ratelimit does, in fixed windows. A
// requests_per_unit of 0 is a limit that denies every request, as
// upstream reads it (the proto cannot tell it from a missing one). A
// field the proto does not define is refused, with
// [rlconfig.ErrInvalidConfig], so that nothing the server meant is
// dropped unseen.
package xds
