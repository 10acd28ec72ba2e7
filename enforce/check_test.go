package enforce_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// Check decides a request in one pass: the store sees one call per kind
// of ask (a Peek of the peeks; a Take of the enforced takes, or a Peek of
// them, for their figures, when the request is denied; a Take of the
// shadow takes), and each hit's verdict is final: a peek's figures are the key's
// as it stands, an Overdraw peek passes a key at its limit exactly, and
// a hit that can never be admitted is denied without asking the store.
func TestCheckCallsTheStoreOncePerKindOfAsk(t *testing.T) {
	a, b, s1, s2 := rule("a", 5), rule("b", 3), rule("s1", 1), rule("s2", 2)
	take := func(r floodgate.Rule, cost int64) enforce.Hit {
		return enforce.Hit{Hit: floodgate.Hit{Rule: r, Key: "k", Cost: cost}}
	}
	peek := func(r floodgate.Rule) enforce.Hit { h := take(r, 0); h.Peek = true; return h }
	over := func(h enforce.Hit) enforce.Hit { h.Overdraw = true; return h }
	shadow := func(h enforce.Hit) enforce.Hit { h.Shadow = true; return h }
	blocked := floodgate.Rule{Name: "blocked", Window: time.Minute}
	type verdict struct {
		decided, allowed bool
		remaining        int64
	}
	for _, c := range []struct {
		name    string
		before  []enforce.Hit // taken first, one Check each
		hits    []enforce.Hit
		opts    []enforce.Option
		calls   string // the store calls: P (a Peek) or T (a Take) and the number of hits
		outcome enforce.Outcome
		want    []verdict
	}{
		{"takes", nil, []enforce.Hit{take(a, 1), take(b, 1)}, nil, "T2", enforce.Allowed,
			[]verdict{{true, true, 4}, {true, true, 2}}},
		{"a peek and a take", nil, []enforce.Hit{peek(a), take(b, 1)}, nil, "P1 T1", enforce.Allowed,
			[]verdict{{true, true, 5}, {true, true, 2}}},
		{"a denied peek takes nothing", []enforce.Hit{take(a, 5)}, []enforce.Hit{peek(a), take(b, 1)}, nil, "P1 P1", enforce.Denied,
			[]verdict{{true, false, 0}, {true, true, 3}}},
		{"an overdraw peek at the limit passes", []enforce.Hit{take(a, 5)}, []enforce.Hit{over(peek(a)), take(b, 1)}, nil, "P1 T1", enforce.Allowed,
			[]verdict{{true, true, 0}, {true, true, 2}}},
		{"an overdraw peek in debt is denied", []enforce.Hit{take(a, 5), over(take(a, 2))}, []enforce.Hit{over(peek(a)), take(b, 1)}, nil, "P1 P1", enforce.Denied,
			[]verdict{{true, false, -2}, {true, true, 3}}},
		{"a peek and a take of one key", nil, []enforce.Hit{peek(a), take(a, 2)}, nil, "P1 T1", enforce.Allowed,
			[]verdict{{true, true, 5}, {true, true, 3}}},
		{"an oversize hit is denied without the store", nil, []enforce.Hit{take(a, 9), take(b, 1)}, nil, "P1", enforce.Denied,
			[]verdict{{true, false, 0}, {true, true, 3}}},
		{"a blocked limit is denied without the store", nil, []enforce.Hit{{Hit: floodgate.Hit{Rule: blocked, Key: "k"}}, take(b, 1)}, nil, "P1", enforce.Denied,
			[]verdict{{true, false, 0}, {true, true, 3}}},
		{"shed: decided by the failure modes alone", nil, []enforce.Hit{take(a, 1), peek(b)}, []enforce.Option{enforce.Unavailable(errShed)}, "", enforce.Local,
			[]verdict{{true, true, 4}, {true, true, 3}}},
		{"a shadow peek of an enforced peek's key is skipped", nil, []enforce.Hit{peek(a), shadow(peek(a))}, nil, "P1", enforce.Allowed,
			[]verdict{{true, true, 5}, {false, false, 0}}},
		{"a shadow take of an earlier shadow take's key is skipped", nil, []enforce.Hit{take(a, 1), shadow(take(s2, 1)), shadow(take(s2, 1))}, nil, "T1 T1", enforce.Allowed,
			[]verdict{{true, true, 4}, {true, true, 1}, {false, false, 0}}},
		{"shadow takes: one Take, then one without the denied", []enforce.Hit{take(s1, 1)},
			[]enforce.Hit{take(a, 1), shadow(take(s1, 1)), shadow(take(s2, 1))}, nil, "T1 T2 T1", enforce.Allowed,
			[]verdict{{true, true, 4}, {true, false, 0}, {true, true, 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newEnv(t)
			g := v.gate(t, enforce.Spec{Name: "pass"})
			for _, h := range c.before {
				if _, err := g.Check(t.Context(), []enforce.Hit{h}); err != nil {
					t.Fatal(err)
				}
			}
			v.fault.Record()
			res, err := g.Check(t.Context(), c.hits, append(c.opts, enforce.DenyOversize())...)
			if err != nil || res.Outcome != c.outcome || len(res.Each) != len(c.hits) {
				t.Fatalf("Check: %v, %v, %d verdicts; want %v, %d", res.Outcome, err, len(res.Each), c.outcome, len(c.hits))
			}
			calls := ""
			for _, call := range v.fault.Recorded() {
				calls += fmt.Sprintf(" %s%d", map[bool]string{true: "P", false: "T"}[call.Peek], len(call.Hits))
			}
			if calls = strings.TrimSpace(calls); calls != c.calls {
				t.Errorf("store calls %q, want %q", calls, c.calls)
			}
			for i, w := range c.want {
				e := res.Each[i]
				if got := (verdict{e.Decision.Policy != "", e.Decision.Allowed, e.Decision.Remaining}); got != w || e.Hit.Rule.Name != c.hits[i].Rule.Name {
					t.Errorf("verdict %d (%s) = %+v, %+v; want %+v", i, c.hits[i].Rule.Name, got, e.Decision, w)
				}
			}
		})
	}
}

var errShed = errors.New("shed")

// DenyOversize denies only what no rule could admit: a hit invalid for
// another reason (an empty key) is still an error; and a store that fails
// on the request's shadow peeks alone leaves them undecided and takes the
// enforced hits, since a shadow hit never fails a request.
func TestCheckDeniesOnlyOversizeAndSurvivesShadowPeekFailures(t *testing.T) {
	a, s1 := rule("a", 5), rule("s1", 1)
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "pass"})
	_, err := g.Check(t.Context(), []enforce.Hit{{Hit: floodgate.Hit{Rule: a}}}, enforce.DenyOversize())
	if !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Errorf("an empty key under DenyOversize: %v; want ErrInvalidHit", err)
	}
	v.fault.Set(faultstore.FailPeeks)
	v.fault.Record()
	res, err := g.Check(t.Context(), []enforce.Hit{
		{Hit: floodgate.Hit{Rule: a, Key: "k"}, Failure: enforce.FailClosed},
		{Hit: floodgate.Hit{Rule: s1, Key: "k"}, Shadow: true, Peek: true},
	})
	calls := v.fault.Recorded()
	if err != nil || res.Outcome != enforce.Allowed || len(calls) != 2 || !calls[0].Peek || calls[1].Peek || len(calls[1].Results) != 1 {
		t.Fatalf("Check with the shadow peek's store call failing: %v, %v, calls %+v; want Allowed, a failed Peek, then a Take", res.Outcome, err, calls)
	}
	if e := res.Each; !e[0].Decision.Allowed || e[0].Decision.Remaining != 4 || e[1].Decision.Policy != "" {
		t.Errorf("verdicts %+v, %+v; want the take allowed with 4 left and the shadow peek undecided", e[0].Decision, e[1].Decision)
	}
}

// A request reports its worst hit under that hit's own Policy, even when
// another hit of the same rule, under another name, comes first.
func TestCheckNamesTheRequestAfterItsWorstHit(t *testing.T) {
	a := rule("a", 5)
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "pass"})
	hit := func(key, policy string) enforce.Hit {
		return enforce.Hit{Hit: floodgate.Hit{Rule: a, Key: key}, Policy: policy}
	}
	for range 2 {
		if _, err := g.Check(t.Context(), []enforce.Hit{hit("y", "")}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := g.Check(t.Context(), []enforce.Hit{hit("x", "by-ip"), hit("y", "by-account")})
	if err != nil || !res.Allowed() {
		t.Fatalf("Check: %v, %v; want allowed", res.Outcome, err)
	}
	if d := res.Decision; d.Policy != "by-account" || d.Remaining != 2 || len(d.Each) != 2 || d.Each[0].Policy != "by-ip" || d.Each[0].Remaining != 4 {
		t.Errorf("decision %q with %d left, each %+v; want by-account's 2 left, by-ip's 4", d.Policy, d.Remaining, d.Each)
	}
}

// A shadow hit that can never be admitted (a blocked limit, a cost past
// the capacity) is a shadow denial like any other: in Result.Shadow and
// counted as shadow_denied under its policy, without asking the store,
// and the request is decided by its enforced hits alone; like the shadow
// takes, it is not reported for a request that the enforced hits deny.
func TestShadowHitNeverAdmittedIsCounted(t *testing.T) {
	a, s1 := rule("a", 5), rule("s1", 1)
	blocked := floodgate.Rule{Name: "blocked", Window: time.Minute}
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "pass"})
	v.fault.Record()
	hits := []enforce.Hit{
		{Hit: floodgate.Hit{Rule: a, Key: "k", Cost: 1}},
		{Hit: floodgate.Hit{Rule: blocked, Key: "k"}, Shadow: true},
		{Hit: floodgate.Hit{Rule: s1, Key: "k", Cost: 9}, Shadow: true, Policy: "s1-label"},
	}
	res, err := g.Check(t.Context(), hits, enforce.DenyOversize())
	if err != nil || res.Outcome != enforce.Allowed || res.Decision.Policy != "a" || res.Decision.Remaining != 4 {
		t.Fatalf("Check: %v by %s, remaining %d, %v; want allowed by a, 4 remaining", res.Outcome, res.Decision.Policy, res.Decision.Remaining, err)
	}
	if calls := v.fault.Recorded(); len(calls) != 1 || len(calls[0].Hits) != 1 || calls[0].Peek {
		t.Errorf("store calls %+v; want one Take of the enforced hit alone", calls)
	}
	var got []string
	for _, d := range res.Shadow {
		got = append(got, fmt.Sprintf("%s %v %d %v", d.Policy, d.Allowed, d.Limit, d.RetryAfter))
	}
	if want := "[blocked false 0 1m0s s1-label false 1 1m0s]"; fmt.Sprint(got) != want {
		t.Errorf("shadow decisions %v, want %s", got, want)
	}
	for policy, want := range map[string]float64{"blocked": 1, "s1-label": 1} {
		if n := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": policy, "outcome": "shadow_denied"}); n != want {
			t.Errorf("shadow_denied{%s} = %v, want %v", policy, n, want)
		}
	}
	// Over a's limit: denied, and the shadow hits are not reported.
	hits[0].Cost = 5
	if res, err = g.Check(t.Context(), hits, enforce.DenyOversize()); err != nil || res.Outcome != enforce.Denied || res.Shadow != nil {
		t.Fatalf("over a: %v, %v, shadow %+v; want denied, no shadow decision", res.Outcome, err, res.Shadow)
	}
	if n := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": "blocked", "outcome": "shadow_denied"}); n != 1 {
		t.Errorf("shadow_denied{blocked} = %v after the denied request, want 1", n)
	}
}
