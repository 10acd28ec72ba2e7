package floodgate

// Overrides gives some keys of a rule a limit of their own: "customer 42
// gets 1000/1m on api", a plan tier, a temporary raise. A [Limiter] with
// [Options.Overrides] asks it about every hit before deciding, and checks
// the hit against the rule it returns. Package overrides keeps such a set
// in Redis, where an operator edits it from a shell (floodgate override
// set), and refreshes a copy in every replica in the background.
//
// An override replaces the rule's limit, window, algorithm and burst; it
// keeps the rule's name (the Limiter sets the name back if Override
// changed it), so it applies to the same state ([Store] defines a
// state's identity): an override that changes only the limit or burst keeps the key's count so far,
// and applies at once to it; one that changes the window or the algorithm
// starts the key from a fresh state, and the state of the base rule is
// used again, as it was left, once the override is gone. The denial cache
// (Options.DenialCacheSize) keys on the rule in force, so a new override
// never serves a denial cached under the old one.
//
// The hit is validated against the overridden rule: a cost above its
// capacity is an [ErrInvalidHit] error, as for any rule, and an override
// that raises the limit raises the largest cost admitted. An override
// the Limiter cannot use (an invalid rule, or an Override that panics)
// is no override: the rule's own limit applies, and the first such is
// logged (Options.Logger), since a mistake in an override must never
// switch a limit off or fail the requests it limits.
// [Limiter.Check], [Limiter.Peek], [Limiter.Allow],
// [Limiter.Wait] and [Limiter.Reset] all apply overrides; [Limiter.Refund]
// undoes what a decision recorded under the rule it was taken with.
type Overrides interface {
	// Override returns the rule that applies to key instead of rule, and
	// true; or false when key has no override under rule. It is called
	// on every decision, by many goroutines at once, so it must be safe
	// for concurrent use, fast, and never wait on I/O: keep the set in
	// memory and refresh it elsewhere. rule is valid.
	Override(rule Rule, key string) (Rule, bool)
}

// Overrides returns the overrides of [Options.Overrides], or nil: what a
// fallback limiter (package enforce's local limits) should apply too.
func (l *Limiter) Overrides() Overrides { return l.overrides }

// Overlay returns the overrides that give a key the rule of the first of
// os that has one for it: per-key overrides from Redis over the live
// limits of a file, say. Nil elements are skipped: with none left, it is
// nil (no overrides, at no cost to a decision); with one, that one.
func Overlay(os ...Overrides) Overrides {
	var o overlay
	for _, x := range os {
		if x != nil {
			o = append(o, x)
		}
	}
	switch len(o) {
	case 0:
		return nil
	case 1:
		return o[0]
	}
	return o
}

type overlay []Overrides

func (o overlay) Override(rule Rule, key string) (Rule, bool) {
	for _, x := range o {
		if r, ok := x.Override(rule, key); ok {
			return r, true
		}
	}
	return rule, false
}
