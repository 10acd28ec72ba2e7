package main

// An allowed difference between floodgate and envoyproxy/ratelimit: a
// step that names it must show it; any other difference fails the run.
type allowed struct {
	id     string
	reason string
	// agree marks a difference from the file mode that both services
	// show alike: its steps must answer the same in both, with the
	// step's xdsWant.
	agree bool
}

// allowlist is printed before every run and mirrored in docs/SERVICE.md's
// list of deliberate differences.
var allowlist = []allowed{
	{id: "all-or-nothing", reason: "a request with one descriptor over its limit records nothing on the others: floodgate reports their quota untouched, envoyproxy/ratelimit spends it, and later answers differ by what it spent"},
	{id: "denied-not-counted", reason: "a denied hits_addend is not recorded: floodgate's OVER_LIMIT status keeps the quota left in limit_remaining (a smaller request may pass), where envoyproxy/ratelimit says 0; envoyproxy/ratelimit increments the counter even when it denies (unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), so a later smaller request is denied there and allowed here"},
	{id: "peek", reason: "a descriptor hits_addend of 0 asks whether one more hit would be allowed: at exactly the limit floodgate answers OVER_LIMIT, and records nothing on the request's other descriptors (all-or-nothing); envoyproxy/ratelimit adds 0 and answers OK there"},
	{id: "pairs", reason: "keys and values are matched as pairs: envoyproxy/ratelimit joins them into one \"key_value\" string, so key \"a\" with value \"b_c\" reaches the limit of key \"a_b\" with value \"c\"; floodgate matches nothing there"},
	{id: "wildcard-anywhere", reason: "a \"*\" anywhere in a value matches, as envoyproxy/ratelimit's README describes today; the pinned envoyproxy/ratelimit build compared here matches a \"*\" only at the end of a value"},
	{id: "negative-hits", reason: "is_negative_hits is refused with InvalidArgument: floodgate refunds only by a decision's receipt, and a blind decrement could credit a key more than it was charged; the pinned envoyproxy/ratelimit build ignores the field and counts the hits as usual"},
}

// xdsAllowlist replaces allowlist when both services take the
// configuration over xDS (rlscompat -xds). Under xDS floodgate counts
// hits past their limits, as upstream does by default
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset), so "denied-not-counted"
// is gone, and so are "all-or-nothing" (the other descriptors of a denied
// request are counted, as there) and "peek" (a check is over only when
// strictly past the limit, as there). The file mode's steps of those
// must answer the same in both here. docs/SERVICE.md mirrors this list.
var xdsAllowlist = []allowed{
	fileEntry("pairs"),
	fileEntry("wildcard-anywhere"),
	fileEntry("negative-hits"),
	{id: "share-threshold", agree: true, reason: "share_threshold has no field in the RateLimitConfig proto (neither the one compiled in here nor the pinned envoyproxy/ratelimit's): xdsconfig reports it dropped and both services count example11's files/* per value, so the steps that share a threshold from files answer alike here, without it"},
}

// fileEntry returns allowlist's entry id, for xdsAllowlist.
func fileEntry(id string) allowed {
	for _, a := range allowlist {
		if a.id == id {
			return a
		}
	}
	panic("rlscompat: no allowlist entry " + id)
}
