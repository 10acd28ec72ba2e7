package main

// An allowed difference between floodgate and envoyproxy/ratelimit: a
// step that names it must show it; any other difference fails the run.
type allowed struct {
	id     string
	reason string
}

// allowlist is printed before every run and mirrored in docs/SERVICE.md's
// list of deliberate differences.
var allowlist = []allowed{
	{"all-or-nothing", "a request with one descriptor over its limit records nothing on the others: floodgate reports their quota untouched, envoyproxy/ratelimit spends it, and later answers differ by what it spent"},
	{"denied-not-counted", "a denied hits_addend is not recorded: floodgate's OVER_LIMIT status keeps the quota left in limit_remaining (a smaller request may pass), where envoyproxy/ratelimit says 0; envoyproxy/ratelimit increments the counter even when it denies (unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), so a later smaller request is denied there and allowed here"},
	{"peek", "a descriptor hits_addend of 0 asks whether one more hit would be allowed: at exactly the limit floodgate answers OVER_LIMIT, and records nothing on the request's other descriptors (all-or-nothing); envoyproxy/ratelimit adds 0 and answers OK there"},
	{"pairs", "keys and values are matched as pairs: envoyproxy/ratelimit joins them into one \"key_value\" string, so key \"a\" with value \"b_c\" reaches the limit of key \"a_b\" with value \"c\"; floodgate matches nothing there"},
	{"wildcard-anywhere", "a \"*\" anywhere in a value matches, as envoyproxy/ratelimit's README describes today; the pinned envoyproxy/ratelimit build compared here matches a \"*\" only at the end of a value"},
	{"negative-hits", "is_negative_hits is refused with InvalidArgument: floodgate refunds only by a decision's receipt, and a blind decrement could credit a key more than it was charged; the pinned envoyproxy/ratelimit build ignores the field and counts the hits as usual"},
	{"not compared", "duration_until_reset (floodgate: until the quota is whole; the same for a fixed window up to rounding) and response_headers_to_add (floodgate sends the draft-11 RateLimit fields, envoyproxy/ratelimit none by default)"},
}
