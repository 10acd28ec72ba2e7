package overrides

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
)

func rule(t *testing.T, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A Set applies its entries to their rule and key only, and no longer
// once they expired, to the nanosecond.
func TestSetOverride(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	vip := rule(t, "api", 1000, time.Minute, floodgate.TokenBucket)
	temp := rule(t, "api", 20, time.Minute, floodgate.SlidingWindow)
	s := newSet([]Entry{
		{Rule: vip, Key: "vip"},
		{Rule: temp, Key: "temp", Expires: now.Add(time.Hour)},
		{Rule: temp, Key: "gone", Expires: now}, // expired already: left out
	}, clock)
	if s.len() != 2 || !s.next.Equal(now.Add(time.Hour)) {
		t.Fatalf("Len = %d, next expiry %v; want 2 and %v", s.len(), s.next, now.Add(time.Hour))
	}
	for _, tc := range []struct {
		rule floodgate.Rule
		key  string
		want floodgate.Rule
		ok   bool
	}{
		{api, "vip", vip, true},
		{api, "temp", temp, true},
		{api, "gone", api, false},
		{api, "nobody", api, false},
		{rule(t, "web", 5, time.Second, floodgate.SlidingWindow), "vip", rule(t, "web", 5, time.Second, floodgate.SlidingWindow), false},
	} {
		if got, ok := s.Override(tc.rule, tc.key); got != tc.want || ok != tc.ok {
			t.Errorf("Override(%s, %q) = %v, %v; want %v, %v", tc.rule.Name, tc.key, got, ok, tc.want, tc.ok)
		}
	}
	now = now.Add(time.Hour - time.Nanosecond)
	if _, ok := s.Override(api, "temp"); !ok {
		t.Error("temp expired a nanosecond early")
	}
	now = now.Add(time.Nanosecond)
	if got, ok := s.Override(api, "temp"); ok || got != api {
		t.Errorf("temp at its expiry = %v, %v; want the base rule", got, ok)
	}
	var empty *Set
	if got, ok := empty.Override(api, "vip"); ok || got != api || empty.len() != 0 || empty.list() != nil {
		t.Error("the nil Set is not empty")
	}
	es := s.list()
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	if len(es) != 2 || es[0].Key != "temp" || !es[0].Expires.Equal(now) || es[1].Key != "vip" || es[1].Rule != vip {
		t.Errorf("entries = %+v; want temp (until %v) then vip", es, now)
	}
}

// An expiry the stored form allows (the years 0 to 9999) but Unix
// nanoseconds cannot hold (past 2262-04-11) keeps the override in force:
// it overflowed into the past, and the service enforced the rule's own
// limit while ls, get and peek showed the override (a new user's
// "forever" override of -ttl 2500000h).
func TestFarExpiryIsInForce(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	vip := rule(t, "api", 100, time.Minute, floodgate.SlidingWindow)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, until := range []time.Time{
		time.Date(2262, 4, 11, 23, 47, 16, 0, time.UTC), // the last second Unix nanoseconds hold
		time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		now.Add(2500000 * time.Hour),
	} {
		s := newSet([]Entry{{Rule: vip, Key: "abuser", Expires: until}}, func() time.Time { return now })
		if got, ok := s.Override(api, "abuser"); !ok || got != vip {
			t.Errorf("an override until %v: %v, %v; want it in force (100/1m)", until, got, ok)
		}
	}
}

// NewSet refuses invalid entries (those overridetable.Entry.Validate refuses, with the
// same errors) and a key given twice.
func TestNewSetRejects(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	fast := floodgate.Rule{Name: "api", Limit: 1001, Window: time.Millisecond, Algorithm: floodgate.TokenBucket}
	for name, tc := range map[string]struct {
		es   []Entry
		rule bool // the error wraps floodgate.ErrInvalidRule
		want string
	}{
		"twice":             {[]Entry{{Rule: api, Key: "k"}, {Rule: api, Key: "k"}}, false, "given twice"},
		"no key":            {[]Entry{{Rule: api}}, false, "key is empty"},
		"bad rule":          {[]Entry{{Rule: floodgate.Rule{Name: "api", Limit: 1}, Key: "k"}}, true, "window"},
		"long key":          {[]Entry{{Rule: api, Key: strings.Repeat("x", bounds.KeyLen+1)}}, false, "at most"},
		"bucket too fast":   {[]Entry{{Rule: fast, Key: "k"}}, true, "a token a microsecond"},
		"expiry past 9999":  {[]Entry{{Rule: api, Key: "k", Expires: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}, false, "years 0 to 9999"},
		"second entry only": {[]Entry{{Rule: api, Key: "a"}, {Rule: api}}, false, "entry 1"},
	} {
		_, err := NewSet(tc.es...)
		if !errors.Is(err, ErrInvalidEntry) || errors.Is(err, floodgate.ErrInvalidRule) != tc.rule || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewSet = %v; want ErrInvalidEntry (ErrInvalidRule: %v) saying %q", name, err, tc.rule, tc.want)
		}
		if len(tc.es) == 1 {
			if verr := overridetable.Entry(tc.es[0]).Validate(); verr == nil || !strings.Contains(err.Error(), verr.Error()) {
				t.Errorf("%s: Validate = %v; want the error NewSet wraps (%v)", name, verr, err)
			}
		}
	}
	s, err := NewSet(Entry{Rule: api, Key: "k"}, Entry{Rule: rule(t, "web", 1, time.Second, floodgate.SlidingWindow), Key: "k"})
	if err != nil || s.len() != 2 {
		t.Fatalf("NewSet of one key under two rules = %v, %v; want 2 entries", s, err)
	}
}

// Two entries whose hashes collide are both found, by their strings. A
// real collision of 64-bit hashes cannot be produced on purpose, so the
// test makes one: B's slot of the index points at A.
func TestSetHashCollision(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	a := Entry{Rule: rule(t, "api", 20, time.Minute, floodgate.SlidingWindow), Key: "a"}
	b := Entry{Rule: rule(t, "api", 30, time.Minute, floodgate.SlidingWindow), Key: "b"}
	s := newSet([]Entry{a, b}, time.Now)
	nh, _ := s.nameHash("api")
	hb := s.hash(nh, "b")
	s.index[hb] = s.index[s.hash(nh, "a")]
	if got, ok := s.Override(api, "b"); ok {
		t.Fatalf("b found as %v with its slot taken and no collision entry", got)
	}
	s.collide = map[[2]string]int32{{"api", "b"}: 1}
	if got, ok := s.Override(api, "b"); !ok || got != b.Rule {
		t.Errorf("b = %v, %v; want %v from the collision map", got, ok, b.Rule)
	}
	if got, ok := s.Override(api, "a"); !ok || got != a.Rule {
		t.Errorf("a = %v, %v; want %v", got, ok, a.Rule)
	}
}

// With more rule names than a lookup scans, names are found by a map.
func TestSetManyRuleNames(t *testing.T) {
	var es []Entry
	for i := range scanNames + 2 {
		es = append(es, Entry{Rule: rule(t, "r"+strconv.Itoa(i), int64(i+1), time.Minute, floodgate.SlidingWindow), Key: "k"})
	}
	if s := newSet(es[:scanNames], time.Now); s.byName != nil {
		t.Errorf("%d names are found by a map; want them scanned", scanNames)
	}
	s := newSet(es, time.Now)
	if s.byName == nil || len(s.names) != scanNames+2 {
		t.Fatalf("%d names, map %v; want %d names in a map", len(s.names), s.byName != nil, scanNames+2)
	}
	for i, e := range es {
		if got, ok := s.Override(rule(t, e.Rule.Name, 100, time.Minute, floodgate.SlidingWindow), "k"); !ok || got.Limit != int64(i+1) {
			t.Errorf("%s = %v, %v; want limit %d", e.Rule.Name, got, ok, i+1)
		}
	}
	if _, ok := s.Override(rule(t, "other", 1, time.Minute, floodgate.SlidingWindow), "k"); ok {
		t.Error("a rule without overrides got one")
	}
}

// The Bloom filter never hides an entry, and lets few misses through to
// the map: with 10,000 entries, fewer than 1 in 200 of 100,000 other keys
// (about 1 in 1,000 expected).
func TestSetBloomFilter(t *testing.T) {
	const n = 10_000
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Rule: rule(t, "api", int64(i+1), time.Minute, floodgate.SlidingWindow), Key: "vip-" + strconv.Itoa(i)}
	}
	s := newSet(es, time.Now)
	if len(s.bloom) != 4096 {
		t.Errorf("filter of %d words for %d entries; want 4096 (16 bits each, a power of two)", len(s.bloom), n)
	}
	for i, e := range es {
		if got, ok := s.Override(api, e.Key); !ok || got.Limit != int64(i+1) {
			t.Fatalf("%s = %v, %v; want limit %d", e.Key, got, ok, i+1)
		}
	}
	nh, _ := s.nameHash("api")
	passed := 0
	for i := range 100_000 {
		h := s.hash(nh, "user-"+strconv.Itoa(i))
		if b := bloomBits(h); s.bloom[h&s.mask]&b == b {
			passed++
		}
	}
	if passed >= 500 {
		t.Errorf("%d of 100,000 misses passed the filter; want fewer than 500", passed)
	}
	t.Logf("%d of 100,000 misses passed the filter", passed)
	if s := newSet(nil, time.Now); len(s.bloom) != 1 {
		t.Errorf("empty set: filter of %d words; want 1", len(s.bloom))
	}
}

// The filter: a word per 4 entries, rounded up to a power of two.
func TestSetFilterSize(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	for _, tc := range []struct{ entries, words int }{{0, 1}, {4, 1}, {5, 2}, {8, 2}, {9, 4}} {
		es := make([]Entry, tc.entries)
		for i := range es {
			es[i] = Entry{Rule: api, Key: strconv.Itoa(i)}
		}
		if s := newSet(es, time.Now); len(s.bloom) != tc.words {
			t.Errorf("%d entries: a filter of %d words; want %d", tc.entries, len(s.bloom), tc.words)
		}
	}
}
