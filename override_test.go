package floodgate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
)

// mapOverrides is an Overrides an individual test edits: rule name and
// key to the rule in force.
type mapOverrides struct {
	mu sync.Mutex
	m  map[[2]string]floodgate.Rule
}

func (o *mapOverrides) Override(r floodgate.Rule, key string) (floodgate.Rule, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	x, ok := o.m[[2]string{r.Name, key}]
	if !ok {
		return r, false
	}
	return x, true
}

func (o *mapOverrides) set(name, key string, r floodgate.Rule) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[[2]string]floodgate.Rule{}
	}
	o.m[[2]string{name, key}] = r
}

func (o *mapOverrides) delete(name, key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, [2]string{name, key})
}

func overridden(t *testing.T, opts floodgate.Options) (*floodgate.Limiter, *mapOverrides) {
	t.Helper()
	o := &mapOverrides{}
	opts.Overrides = o
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, o
}

// admitted counts the requests of key that rule admits in a row, up to
// 100.
func admitted(t *testing.T, l *floodgate.Limiter, rule floodgate.Rule, key string) int {
	t.Helper()
	for n := range 100 {
		d, err := l.Allow(context.Background(), rule, key)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	return 100
}

// An override gives one key its own limit, under the rule's name; other
// keys keep the base rule.
func TestOverrideGivesAKeyItsLimit(t *testing.T) {
	l, o := overridden(t, floodgate.Options{})
	api := mustRule(t, "api", 2, time.Minute)
	// The override's own name is ignored: it applies to api's state.
	o.set("api", "vip", mustRule(t, "other-name", 5, time.Minute))
	d, err := l.Allow(context.Background(), api, "vip")
	if err != nil || !d.Allowed || d.Policy != "api" || d.Limit != 5 || d.Remaining != 4 {
		t.Fatalf("first request of vip = %+v, %v; want allowed under api with limit 5, 4 left", d, err)
	}
	if n := admitted(t, l, api, "vip"); n != 4 {
		t.Errorf("vip admitted %d more; want 4 (5 in all)", n)
	}
	if n := admitted(t, l, api, "plain"); n != 2 {
		t.Errorf("plain admitted %d; want the base limit 2", n)
	}
	if n := admitted(t, l, mustRule(t, "web", 3, time.Minute), "vip"); n != 3 {
		t.Errorf("vip under another rule admitted %d; want that rule's 3", n)
	}
}

// A changed limit keeps the key's count; a changed window starts a fresh
// state, and the base rule's state is found again as it was left.
func TestOverrideStateIdentity(t *testing.T) {
	ctx := context.Background()
	l, o := overridden(t, floodgate.Options{})
	api := mustRule(t, "api", 10, time.Minute)
	for range 3 {
		if d, err := l.Allow(ctx, api, "k"); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	o.set("api", "k", mustRule(t, "api", 4, time.Minute))
	if d, err := l.Allow(ctx, api, "k"); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("under a limit of 4 after 3 = %+v, %v; want the 4th allowed with 0 left (the count is kept)", d, err)
	}
	if d, _ := l.Allow(ctx, api, "k"); d.Allowed {
		t.Fatal("a 5th request under a limit of 4 was allowed")
	}
	o.set("api", "k", mustRule(t, "api", 4, 2*time.Minute))
	if n := admitted(t, l, api, "k"); n != 4 {
		t.Errorf("a changed window admitted %d; want 4 from a fresh state", n)
	}
	o.delete("api", "k")
	if n := admitted(t, l, api, "k"); n != 6 {
		t.Errorf("back on the base rule, admitted %d; want 6 (10 less the 4 taken under it)", n)
	}
}

// A check of several hits, Peek and Reset all use the rule in force.
func TestOverrideCheckPeekReset(t *testing.T) {
	ctx := context.Background()
	l, o := overridden(t, floodgate.Options{})
	ip := mustRule(t, "ip", 100, time.Minute)
	acct := mustRule(t, "acct", 1, time.Minute)
	o.set("acct", "a1", mustRule(t, "acct", 3, time.Hour))
	hits := []floodgate.Hit{{Rule: ip, Key: "192.0.2.1"}, {Rule: acct, Key: "a1"}}
	for i := range 3 {
		d, err := l.Check(ctx, hits...)
		if err != nil || !d.Allowed || d.Each[1].Limit != 3 || d.Each[1].Window != time.Hour || d.Each[1].Remaining != int64(2-i) {
			t.Fatalf("check %d = %+v, %v; want allowed, acct at 3/1h with %d left", i, d, err, 2-i)
		}
	}
	d, err := l.Check(ctx, hits...)
	if err != nil || d.Allowed || d.Policy != "acct" || d.Each[0].Remaining != 97 {
		t.Fatalf("4th check = %+v, %v; want denied by acct, ip untouched at 97", d, err)
	}
	p, err := l.Peek(ctx, floodgate.Hit{Rule: acct, Key: "a1"})
	if err != nil || p.Allowed || p.Limit != 3 || p.Window != time.Hour {
		t.Fatalf("Peek = %+v, %v; want denied under 3/1h", p, err)
	}
	// Reset with the base rule forgets the override's state (3/1h), not
	// the base rule's (1/1m).
	if err := l.Reset(ctx, acct, "a1"); err != nil {
		t.Fatal(err)
	}
	if n := admitted(t, l, acct, "a1"); n != 3 {
		t.Errorf("after Reset, admitted %d; want 3", n)
	}
}

// The hit is validated against the overridden rule. An override the
// Limiter cannot use (an invalid rule, or a panic of the Overrides that a
// key trips) is no override: the rule's own limit applies, on every
// method, and the first refusal is logged; a mistake in an override never
// switches a limit off or fails the requests it limits.
func TestOverrideValidated(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	o := &mapOverrides{}
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{Overrides: panicking{o}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	api := mustRule(t, "api", 10, time.Minute)
	o.set("api", "small", mustRule(t, "api", 2, time.Minute))
	o.set("api", "bad", floodgate.Rule{Name: "api", Limit: 0, Window: time.Minute})
	o.set("api", "renamed", mustRule(t, "other", 3, time.Minute))
	if _, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "small", Cost: 5}); !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Errorf("cost 5 under an override of 2 = %v; want ErrInvalidHit", err)
	}
	if _, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "small", Cost: 5}); !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Errorf("Check of cost 5 under an override of 2 = %v; want ErrInvalidHit", err)
	}
	if d, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "other", Cost: 5}); err != nil || !d.Allowed {
		t.Errorf("cost 5 under the base 10 = %+v, %v; want allowed", d, err)
	}
	// The override's rule keeps the rule's name: the state is api's.
	if d, err := l.Allow(ctx, api, "renamed"); err != nil || d.Policy != "api" || d.Limit != 3 || d.Remaining != 2 {
		t.Errorf("an override named other = %+v, %v; want api's state under a limit of 3", d, err)
	}
	for _, key := range []string{"bad", "panic"} {
		for i := range 11 {
			d, err := l.Allow(ctx, api, key)
			if err != nil || d.Allowed != (i < 10) || d.Limit != 10 {
				t.Fatalf("request %d of %s = %+v, %v; want the base 10/1m", i+1, key, d, err)
			}
		}
		p, err := l.Peek(ctx, floodgate.Hit{Rule: api, Key: key})
		if err != nil || p.Allowed || p.Limit != 10 {
			t.Errorf("Peek of %s = %+v, %v; want denied under the base 10", key, p, err)
		}
		if err := l.Reset(ctx, api, key); err != nil {
			t.Errorf("Reset of %s = %v", key, err)
		}
		if d, err := l.Allow(ctx, api, key); err != nil || !d.Allowed || d.Remaining != 9 {
			t.Errorf("after Reset of %s = %+v, %v; want the base's count forgotten", key, d, err)
		}
	}
	if n := strings.Count(logs.String(), "an override could not be used"); n != 1 {
		t.Errorf("%d log lines about unusable overrides, want 1:\n%s", n, logs.String())
	}
}

// panicking is an Overrides with a bug that the key "panic" trips.
type panicking struct{ floodgate.Overrides }

func (p panicking) Override(r floodgate.Rule, key string) (floodgate.Rule, bool) {
	if key == "panic" {
		var m map[string]int
		m[key]++ // assignment to a nil map
	}
	return p.Overrides.Override(r, key)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Overlay gives a key the rule of the first overrides that has one.
func TestOverlay(t *testing.T) {
	top, under := &mapOverrides{}, &mapOverrides{}
	top.set("api", "a", mustRule(t, "api", 5, time.Minute))
	under.set("api", "a", mustRule(t, "api", 7, time.Minute))
	under.set("api", "b", mustRule(t, "api", 9, time.Minute))
	o := floodgate.Overlay(top, nil, under)
	api := mustRule(t, "api", 1, time.Minute)
	for key, want := range map[string]int64{"a": 5, "b": 9} {
		if r, ok := o.Override(api, key); !ok || r.Limit != want {
			t.Errorf("Override(%s) = %v, %v; want limit %d", key, r, ok, want)
		}
	}
	if r, ok := o.Override(api, "c"); ok || r != api {
		t.Errorf("Override(c) = %v, %v; want none", r, ok)
	}
	if o := floodgate.Overlay(nil, nil); o != nil {
		t.Errorf("Overlay of nils = %v; want nil, no overrides", o)
	}
	if o := floodgate.Overlay(nil, top); o != floodgate.Overrides(top) {
		t.Errorf("Overlay of one = %v; want that one", o)
	}
}

// A denial cached under the base rule is not served once an override
// raises the limit.
func TestOverrideBypassesStaleDenial(t *testing.T) {
	for _, local := range []bool{true, false} {
		t.Run("local="+strconv.FormatBool(local), func(t *testing.T) {
			o := &mapOverrides{}
			var s floodgate.Store = memstore.New(memstore.Options{})
			if !local {
				s = remote{s} // the general path, without TakeOne
			}
			l, err := floodgate.New(s, floodgate.Options{DenialCacheSize: 16, Overrides: o})
			if err != nil {
				t.Fatal(err)
			}
			api := mustRule(t, "api", 1, time.Minute)
			if n := admitted(t, l, api, "k"); n != 1 {
				t.Fatalf("admitted %d; want 1", n)
			}
			o.set("api", "k", mustRule(t, "api", 3, time.Minute))
			if n := admitted(t, l, api, "k"); n != 2 {
				t.Errorf("after raising to 3, admitted %d; want 2 more", n)
			}
		})
	}
}

// remote hides a store's LocalStore methods.
type remote struct{ floodgate.Store }

// BenchmarkAllowOverrides measures the cost of overrides on the hot path
// (memstore, one goroutine, 10,000 keys): none configured, an empty set,
// a set of 10,000 overrides of another rule (the rule's name misses),
// and of the same rule (the key misses, or hits).
func BenchmarkAllowOverrides(b *testing.B) {
	const n = 10_000
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "user-" + strconv.Itoa(i)
	}
	api := floodgate.Rule{Name: "api", Limit: 1_000_000, Window: time.Second, Algorithm: floodgate.TokenBucket}
	entries := func(rule string) []overrides.Entry {
		es := make([]overrides.Entry, n)
		for i := range es {
			es[i] = overrides.Entry{Rule: floodgate.Rule{Name: rule, Limit: 1_000_000, Window: time.Second, Algorithm: floodgate.TokenBucket}, Key: "vip-" + strconv.Itoa(i)}
			if rule == "api-hit" {
				// A limit of its own, so the override is applied and
				// the hit validated again.
				es[i].Rule.Name, es[i].Rule.Limit, es[i].Key = "api", 999_999, ks[i]
			}
		}
		return es
	}
	set := func(es []overrides.Entry) floodgate.Overrides {
		s, err := overrides.NewSet(es...)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range es {
			if r, ok := s.Override(e.Rule, e.Key); !ok || r != e.Rule {
				b.Fatalf("the set lacks the override %v of key %q", e.Rule, e.Key)
			}
		}
		return s
	}
	cases := []struct {
		name string
		o    floodgate.Overrides
	}{
		{"none", nil},
		{"empty", set(nil)},
		{"10k-other-rule", set(entries("web"))},
		{"10k-key-miss", set(entries("api"))},
		{"10k-key-hit", set(entries("api-hit"))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			l, err := floodgate.New(s, floodgate.Options{Overrides: c.o})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				d, err := l.Allow(ctx, api, ks[i%n])
				if err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
	}
}

// A hit's cost is validated against the rule in force: an override that
// raises the limit raises the largest cost admitted, on every method and
// on both store paths (base 10/1m, override 1000/1m: cost 50 is
// admitted, though above the base's capacity 10).
func TestOverrideRaisesTheLargestCost(t *testing.T) {
	ctx := context.Background()
	for _, local := range []bool{true, false} {
		t.Run("local="+strconv.FormatBool(local), func(t *testing.T) {
			o := &mapOverrides{}
			var s floodgate.Store = memstore.New(memstore.Options{})
			if !local {
				s = remote{s}
			}
			l, err := floodgate.New(s, floodgate.Options{Overrides: o})
			if err != nil {
				t.Fatal(err)
			}
			api := mustRule(t, "api", 10, time.Minute)
			o.set("api", "big", mustRule(t, "api", 1000, time.Minute))
			d, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "big", Cost: 50})
			if err != nil || !d.Allowed || d.Limit != 1000 || d.Remaining != 950 {
				t.Fatalf("Check(cost 50) = %+v, %v; want allowed under 1000 with 950 left", d, err)
			}
			p, err := l.Peek(ctx, floodgate.Hit{Rule: api, Key: "big", Cost: 50})
			if err != nil || !p.Allowed || p.Limit != 1000 || p.Remaining != 900 {
				t.Fatalf("Peek(50) = %+v, %v; want allowed under 1000 with 900 left after it", p, err)
			}
			c, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "big", Cost: 50}, floodgate.Hit{Rule: api, Key: "other"})
			if err != nil || !c.Allowed || c.Each[0].Remaining != 900 || c.Each[1].Limit != 10 || c.Each[1].Remaining != 9 {
				t.Fatalf("Check = %+v, %v; want allowed, big at 900 of 1000, other at 9 of 10", c, err)
			}
			// The base rule still bounds the keys without an override.
			if _, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "other", Cost: 50}); !errors.Is(err, floodgate.ErrInvalidHit) {
				t.Fatalf("Check(cost 50) without an override = %v; want ErrInvalidHit", err)
			}
			// And an override that lowers the limit lowers the bound.
			o.set("api", "small", mustRule(t, "api", 2, time.Minute))
			if _, err := l.Check(ctx, floodgate.Hit{Rule: api, Key: "small", Cost: 3}); !errors.Is(err, floodgate.ErrInvalidHit) {
				t.Fatalf("Check(cost 3) under an override of 2 = %v; want ErrInvalidHit", err)
			}
		})
	}
}

// countingOverrides is mapOverrides that counts its lookups.
type countingOverrides struct {
	mapOverrides
	lookups atomic.Int64
}

func (o *countingOverrides) Override(r floodgate.Rule, key string) (floodgate.Rule, bool) {
	o.lookups.Add(1)
	return o.mapOverrides.Override(r, key)
}

// A hit that InForce resolved is checked under the rule it carries: the
// overrides are looked up once, by InForce, and a change of them before
// the check does not change what the check enforces, which is what a
// caller reporting InForce's rule reports.
func TestInForceHitIsCheckedUnderItsRule(t *testing.T) {
	base := floodgate.Rule{Name: "api", Limit: 10, Window: time.Minute}
	three := floodgate.Rule{Name: "api", Limit: 3, Window: time.Minute}
	one := floodgate.Rule{Name: "api", Limit: 1, Window: time.Minute}
	o := &countingOverrides{}
	o.set("api", "k", three)
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{Overrides: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in, err := l.InForce(floodgate.Hit{Rule: base, Key: "k"})
	if err != nil || in.Rule != three {
		t.Fatalf("InForce: %v, %v; want %v", in.Rule, err, three)
	}
	o.set("api", "k", one) // the overrides change between InForce and the checks
	for _, check := range []struct {
		name string
		do   func() (floodgate.Decision, error)
	}{
		{"Peek", func() (floodgate.Decision, error) { return l.Peek(ctx, in) }},
		{"Check", func() (floodgate.Decision, error) { return l.Check(ctx, in) }},
		{"Check of two", func() (floodgate.Decision, error) {
			return l.Check(ctx, in, floodgate.Hit{Rule: floodgate.Rule{Name: "other", Limit: 5, Window: time.Minute}, Key: "k"})
		}},
	} {
		before := o.lookups.Load()
		d, err := check.do()
		if err != nil {
			t.Fatalf("%s: %v", check.name, err)
		}
		if d.Each != nil {
			d = d.Each[0]
		}
		if !d.Allowed || d.Limit != three.Limit {
			t.Errorf("%s: allowed %v under a limit of %d; want allowed under the resolved %d", check.name, d.Allowed, d.Limit, three.Limit)
		}
		// The second hit of "Check of two" was not resolved ahead: it is
		// looked up, once; the resolved one never again.
		want := int64(0)
		if check.name == "Check of two" {
			want = 1
		}
		if got := o.lookups.Load() - before; got != want {
			t.Errorf("%s: %d override lookups, want %d", check.name, got, want)
		}
	}
	// The same key and rule not resolved ahead: the overrides as they are
	// now (a limit of 1, already spent twice under the resolved rule's
	// state, which is the rule name's).
	d, err := l.Check(ctx, floodgate.Hit{Rule: base, Key: "k"})
	if err != nil || d.Allowed || d.Limit != one.Limit {
		t.Errorf("an unresolved hit: allowed %v under %d, %v; want denied under %d", d.Allowed, d.Limit, err, one.Limit)
	}
}
