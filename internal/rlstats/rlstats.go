// Package rlstats is the seam between package rls and the statistics
// that the floodgate service sends in envoyproxy/ratelimit's names
// (internal/upstats): rls counts each request once, for its own
// Prometheus series and for a Recorder, at the same point, so that the
// two agree. It imports nothing, so rls links no statsd library.
package rlstats

// Recorder receives what envoyproxy/ratelimit counts in its statistics.
// Its methods are called on the request path, concurrently: they must
// be quick and safe for concurrent use.
type Recorder interface {
	// Limit adds c to the counts of the limit whose statistics key is
	// key, in envoyproxy/ratelimit's form: the domain, then each entry's
	// key, with _value where the configuration keeps the value
	// ("messaging.message_type_marketing.to_number"), unsanitized.
	Limit(key string, c Counts)
	// DomainNotFound counts a request for a domain the configuration
	// does not have.
	DomainNotFound(domain string)
	// ConfigLoad counts a configuration loaded (ok) or refused.
	ConfigLoad(ok bool)
	// CallError counts a ShouldRateLimit call answered with an error:
	// store is true when the store failed (upstream's redis_error), false
	// for any other error (service_error).
	CallError(store bool)
}

// Counts are one limit's hits of one request, as envoyproxy/ratelimit
// counts them (package rls's Metrics).
type Counts struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}
