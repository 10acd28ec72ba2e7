package httplimit

// Covers reports whether any route of the request whose verdict is r
// counted a hit of rule on key: the nesting's bookkeeping, for the tests.
func Covers(r Result, rule, key string) bool { return r.covers(rule, key) }
