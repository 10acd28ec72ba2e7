package overrides

import (
	"fmt"
	"sort"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Set is a fixed set of overrides, held in memory: a floodgate.Overrides
// for a service that needs no Redis (memstore) or takes its overrides
// from elsewhere. A [Source] keeps one Set, loaded from Redis, and swaps
// it for a new one on every change. A Set is immutable and safe for
// concurrent use; the nil *Set is an empty one.
//
// Looking up a key that has no override costs a map lookup of the rule's
// name (and one of the key when the rule has overrides), and allocates
// nothing. An entry that has expired no longer applies, to the
// nanosecond, by the clock of the Set (time.Now for [NewSet]).
type Set struct {
	rules map[string]map[string]entry // rule name -> key -> entry
	n     int
	now   func() time.Time
	next  time.Time // the earliest expiry of an entry, zero if none
}

// entry is an Entry as a Set keeps it.
type entry struct {
	rule    floodgate.Rule
	expires int64 // Unix nanoseconds; 0 never
}

var _ floodgate.Overrides = (*Set)(nil)

// NewSet returns the set of entries, which must be valid and name each
// rule and key once. Entries that expired already are left out.
func NewSet(entries ...Entry) (*Set, error) {
	seen := make(map[string]bool, len(entries))
	for i, e := range entries {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("overrides: entry %d: %w", i, err)
		}
		if seen[e.field()] {
			return nil, fmt.Errorf("%w: entry %d: key %q of rule %s given twice", ErrInvalidEntry, i, truncate(e.Key), e.Rule.Name)
		}
		seen[e.field()] = true
	}
	return newSet(entries, time.Now), nil
}

// newSet builds a set of valid entries, each rule and key once, leaving
// out those expired by now.
func newSet(entries []Entry, now func() time.Time) *Set {
	s := &Set{rules: map[string]map[string]entry{}, now: now}
	t := now()
	for _, e := range entries {
		if e.ExpiredAt(t) {
			continue
		}
		keys := s.rules[e.Rule.Name]
		if keys == nil {
			keys = map[string]entry{}
			s.rules[e.Rule.Name] = keys
		}
		x := entry{rule: e.Rule}
		if !e.Expires.IsZero() {
			x.expires = e.Expires.UnixNano()
			if s.next.IsZero() || e.Expires.Before(s.next) {
				s.next = e.Expires
			}
		}
		keys[e.Key] = x
		s.n++
	}
	return s
}

// Override implements floodgate.Overrides.
func (s *Set) Override(rule floodgate.Rule, key string) (floodgate.Rule, bool) {
	if s == nil || s.n == 0 {
		return rule, false
	}
	keys := s.rules[rule.Name]
	if keys == nil {
		return rule, false
	}
	e, ok := keys[key]
	if !ok || e.expires != 0 && s.now().UnixNano() >= e.expires {
		return rule, false
	}
	return e.rule, true
}

// Len is the number of entries of the set, including those that expired
// since it was made.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Entries returns the entries of the set, by rule name and key, including
// those that expired since it was made.
func (s *Set) Entries() []Entry {
	if s == nil {
		return nil
	}
	out := make([]Entry, 0, s.n)
	for _, keys := range s.rules {
		for k, e := range keys {
			x := Entry{Rule: e.rule, Key: k}
			if e.expires != 0 {
				x.Expires = time.Unix(0, e.expires).UTC()
			}
			out = append(out, x)
		}
	}
	sortEntries(out)
	return out
}

func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].Rule.Name != es[j].Rule.Name {
			return es[i].Rule.Name < es[j].Rule.Name
		}
		return es[i].Key < es[j].Key
	})
}
