package overrides

import (
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
)

// Set is a fixed set of overrides, held in memory: a floodgate.Overrides
// for a service that needs no Redis (memstore) or takes its overrides
// from elsewhere. A [Table] keeps one Set, loaded from Redis, and swaps
// it for a new one on every change. A Set is immutable and safe for
// concurrent use; the nil *Set is an empty one.
//
// Looking up a key that has no override allocates nothing and costs a
// scan of the few rule names that have overrides, then (when the rule has
// some) one hash of the key and one word of a Bloom filter, which answers
// most misses without touching the map (BENCHMARKS.md has the figures).
// An entry that has expired no longer applies, to the nanosecond, by the
// clock of the Set (time.Now for [NewSet]).
type Set struct {
	seed    maphash.Seed
	names   []ruleHash        // the rule names that have overrides, and their hashes
	byName  map[string]uint64 // the same, when there are more than scanNames of them
	index   map[uint64]int32  // hash of a rule name and key -> position in entries
	collide map[[2]string]int32
	entries []entry
	bloom   []uint64 // a blocked Bloom filter of the hashes in index: one word per hash
	mask    uint64   // len(bloom) - 1, a power of two less one
	now     func() time.Time
	next    time.Time // the earliest expiry of an entry, zero if none
}

// scanNames is how many rule names a lookup compares one by one before
// a map lookup is cheaper.
const scanNames = 8

type ruleHash struct {
	name string
	hash uint64
}

// entry is an Entry as a Set keeps it.
type entry struct {
	name, key string
	rule      floodgate.Rule
	expires   int64 // Unix nanoseconds, math.MaxInt64 for an expiry past 2262; 0 never
}

var _ floodgate.Overrides = (*Set)(nil)

// NewSet returns the set of entries, or an error wrapping
// [ErrInvalidEntry] for an invalid entry (see Validation in the package
// doc) or a rule and key named twice. Entries that expired already are
// left out.
func NewSet(entries ...Entry) (*Set, error) {
	seen := make(map[[2]string]bool, len(entries))
	for i, e := range entries {
		if err := overridetable.Entry(e).Validate(); err != nil {
			return nil, fmt.Errorf("overrides: entry %d: %w", i, err)
		}
		if seen[[2]string{e.Rule.Name, e.Key}] {
			return nil, fmt.Errorf("%w: entry %d: key %q of rule %s given twice", ErrInvalidEntry, i, overridetable.Truncate(e.Key), e.Rule.Name)
		}
		seen[[2]string{e.Rule.Name, e.Key}] = true
	}
	return newSet(entries, time.Now), nil
}

// newSet builds a set of valid entries, each rule and key once, leaving
// out those expired by now.
func newSet(entries []Entry, now func() time.Time) *Set {
	s := &Set{seed: maphash.MakeSeed(), index: make(map[uint64]int32, len(entries)), now: now}
	// About 16 bits per entry, in whole words: with 4 bits set per
	// entry, about one miss in a thousand passes the filter.
	words := 1
	for words*4 < len(entries) {
		words *= 2
	}
	s.bloom, s.mask = make([]uint64, words), uint64(words-1)
	t := now()
	names := map[string]uint64{}
	for _, e := range entries {
		if overridetable.Entry(e).ExpiredAt(t) {
			continue
		}
		nh, ok := names[e.Rule.Name]
		if !ok {
			nh = maphash.String(s.seed, e.Rule.Name)
			names[e.Rule.Name] = nh
			s.names = append(s.names, ruleHash{e.Rule.Name, nh})
		}
		x := entry{name: e.Rule.Name, key: e.Key, rule: e.Rule}
		if !e.Expires.IsZero() {
			x.expires = math.MaxInt64 // past what Unix nanoseconds hold: in force until then
			if e.Expires.Before(time.Unix(0, math.MaxInt64)) {
				x.expires = e.Expires.UnixNano()
			}
			if s.next.IsZero() || e.Expires.Before(s.next) {
				s.next = e.Expires
			}
		}
		pos := int32(len(s.entries))
		s.entries = append(s.entries, x)
		h := s.hash(nh, e.Key)
		s.bloom[h&s.mask] |= bloomBits(h)
		if _, taken := s.index[h]; taken {
			// Another entry has this hash (about one chance in 2^64 per
			// pair): this one is found by its strings.
			if s.collide == nil {
				s.collide = map[[2]string]int32{}
			}
			s.collide[[2]string{e.Rule.Name, e.Key}] = pos
			continue
		}
		s.index[h] = pos
	}
	if len(s.names) > scanNames {
		s.byName = names
	}
	return s
}

// hash combines the hash of a rule name with that of a key.
func (s *Set) hash(name uint64, key string) uint64 {
	return (name*0x9e3779b97f4a7c15 + 1) ^ maphash.String(s.seed, key)
}

// bloomBits are the 4 bits of a hash's word in the Bloom filter, from
// the hash's high bits (the low ones pick the word).
func bloomBits(h uint64) uint64 {
	return 1<<(h>>40&63) | 1<<(h>>46&63) | 1<<(h>>52&63) | 1<<(h>>58)
}

// Override implements floodgate.Overrides.
func (s *Set) Override(rule floodgate.Rule, key string) (floodgate.Rule, bool) {
	if s == nil || len(s.entries) == 0 {
		return rule, false
	}
	nh, ok := s.nameHash(rule.Name)
	if !ok {
		return rule, false
	}
	h := s.hash(nh, key)
	if b := bloomBits(h); s.bloom[h&s.mask]&b != b {
		return rule, false
	}
	pos, ok := s.index[h]
	if !ok {
		return rule, false
	}
	e := &s.entries[pos]
	if e.name != rule.Name || e.key != key {
		if pos, ok = s.collide[[2]string{rule.Name, key}]; !ok {
			return rule, false
		}
		e = &s.entries[pos]
	}
	if e.expires != 0 && s.now().UnixNano() >= e.expires {
		return rule, false
	}
	return e.rule, true
}

// nameHash returns the hash of name, if name has overrides.
func (s *Set) nameHash(name string) (uint64, bool) {
	if s.byName != nil {
		h, ok := s.byName[name]
		return h, ok
	}
	for _, n := range s.names {
		if n.name == name {
			return n.hash, true
		}
	}
	return 0, false
}

// len is the number of entries of the set, including those that expired
// since it was made.
func (s *Set) len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

// list returns the entries of the set, including those that expired
// since it was made, in no order.
func (s *Set) list() []Entry {
	if s == nil {
		return nil
	}
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		x := Entry{Rule: e.rule, Key: e.key}
		if e.expires != 0 {
			x.Expires = time.Unix(0, e.expires).UTC()
		}
		out = append(out, x)
	}
	return out
}
