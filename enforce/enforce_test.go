package enforce_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/fields"
	"github.com/floodgate-rl/floodgate/internal/promtest"
	"github.com/floodgate-rl/floodgate/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an Enforcer on a memstore behind a fault injector.
type env struct {
	e     *enforce.Enforcer
	fault *faultstore.Store
	reg   *prometheus.Registry
	logs  *bytes.Buffer
}

func newEnv(t *testing.T) *env { return newEnvOverridden(t, nil) }

// newEnvOverridden is newEnv with a Limiter that applies o.
func newEnvOverridden(t *testing.T, o floodgate.Overrides) *env {
	t.Helper()
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	v := &env{fault: faultstore.New(ms), reg: prometheus.NewRegistry(), logs: new(bytes.Buffer)}
	lim, err := floodgate.New(v.fault, floodgate.Options{Timeout: 20 * time.Millisecond, Overrides: o})
	if err != nil {
		t.Fatal(err)
	}
	v.e, err = enforce.New(enforce.Options{Limiter: lim, Registerer: v.reg, Logger: slog.New(slog.NewTextHandler(v.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.e.Close() })
	return v
}

func (v *env) gate(t *testing.T, s enforce.Spec) *enforce.Gate {
	t.Helper()
	g, err := v.e.Gate(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// metric sums the values of the series of name whose labels agree with want.
func (v *env) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	return promtest.Sum(t, v.reg, name, want)
}

func rule(name string, limit int64) floodgate.Rule {
	return floodgate.Rule{Name: name, Limit: limit, Window: time.Minute}
}

func hit(r floodgate.Rule, key string, m enforce.FailureMode) enforce.Hit {
	return enforce.Hit{Hit: floodgate.Hit{Rule: r, Key: key}, Failure: m}
}

// With the store down, each hit takes its failure mode, and the worst
// wins: closed over local over open; local hits are counted by the local
// limits alone, open ones pass.
func TestMixedFailureModes(t *testing.T) {
	a, b := rule("a", 2), rule("b", 5)
	cases := []struct {
		name     string
		modes    [2]enforce.FailureMode
		outcomes []enforce.Outcome // of three checks in a row
		policy   string            // the local decision's policy
	}{
		{"closed wins over local", [2]enforce.FailureMode{enforce.FailClosed, enforce.FailLocal}, []enforce.Outcome{enforce.FailedClosed, enforce.FailedClosed, enforce.FailedClosed}, ""},
		{"closed wins over open", [2]enforce.FailureMode{enforce.FailOpen, enforce.FailClosed}, []enforce.Outcome{enforce.FailedClosed, enforce.FailedClosed, enforce.FailedClosed}, ""},
		{"local decides its hits only", [2]enforce.FailureMode{enforce.FailOpen, enforce.FailLocal}, []enforce.Outcome{enforce.Local, enforce.Local, enforce.Local}, "b"},
		{"both local", [2]enforce.FailureMode{enforce.FailLocal, enforce.FailLocal}, []enforce.Outcome{enforce.Local, enforce.Local, enforce.Local}, "a"},
		{"both open", [2]enforce.FailureMode{enforce.FailOpen, enforce.FailOpen}, []enforce.Outcome{enforce.FailedOpen, enforce.FailedOpen, enforce.FailedOpen}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			g := v.gate(t, enforce.Spec{Name: "mixed"})
			v.fault.Set(faultstore.Fail)
			var allowed []bool
			for i, want := range tc.outcomes {
				res, err := g.Check(t.Context(), []enforce.Hit{hit(a, "k", tc.modes[0]), hit(b, "k", tc.modes[1])})
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome != want {
					t.Fatalf("check %d: outcome %v, want %v", i, res.Outcome, want)
				}
				if !errors.Is(res.Err, faultstore.ErrInjected) {
					t.Errorf("check %d: Err = %v, want the store's error", i, res.Err)
				}
				if want == enforce.Local && res.Decision.Policy != tc.policy {
					t.Errorf("check %d: local decision by %q, want %q", i, res.Decision.Policy, tc.policy)
				}
				allowed = append(allowed, res.Allowed())
			}
			// Local "a" (limit 2) admits two of three; local "b" alone
			// (limit 5) all three; closed none; open all.
			want := map[enforce.Outcome][]bool{enforce.FailedClosed: {false, false, false}, enforce.FailedOpen: {true, true, true}}[tc.outcomes[0]]
			if tc.outcomes[0] == enforce.Local {
				want = []bool{true, true, tc.policy == "b"}
			}
			if fmt.Sprint(allowed) != fmt.Sprint(want) {
				t.Errorf("allowed %v, want %v", allowed, want)
			}
			if n := v.metric(t, "floodgate_decisions_total", map[string]string{"gate": "mixed", "outcome": tc.outcomes[0].String()}); n != 3 {
				t.Errorf("decisions{outcome=%v} = %v, want 3", tc.outcomes[0], n)
			}
			if n := v.metric(t, "floodgate_store_errors_total", map[string]string{"gate": "mixed", "reason": "error"}); n != 3 {
				t.Errorf("store errors = %v, want 3", n)
			}
		})
	}
}

// A gate checks rules that come with the request, counted under their own
// policy, all-or-nothing and with the cost of each hit.
func TestCheckTakesRulesFromTheRequest(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "rls"})
	small, big := rule("small", 3), rule("big", 100)
	check := func(cost int64) enforce.Result {
		t.Helper()
		res, err := g.Check(t.Context(), []enforce.Hit{
			{Hit: floodgate.Hit{Rule: big, Key: "u", Cost: cost}},
			{Hit: floodgate.Hit{Rule: small, Key: "u", Cost: cost}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := check(2); res.Outcome != enforce.Allowed || res.Decision.Remaining != 1 || res.Decision.Policy != "small" {
		t.Fatalf("first check: %v, remaining %d of %s; want allowed, 1 of small", res.Outcome, res.Decision.Remaining, res.Decision.Policy)
	}
	res := check(2) // 2 more on small's 1 left: denied, and big records nothing
	if res.Outcome != enforce.Denied || res.Decision.Policy != "small" {
		t.Fatalf("second check: %v by %s, want denied by small", res.Outcome, res.Decision.Policy)
	}
	if each := fields.Each(res.Decision); len(each) != 2 || each[0].Remaining != 98 {
		t.Errorf("big after a denied check: %+v, want 98 left (the denial recorded nothing)", each)
	}
	if res := check(1); res.Outcome != enforce.Allowed || res.Decision.Remaining != 0 {
		t.Errorf("third check: %v, remaining %d; want allowed, 0", res.Outcome, res.Decision.Remaining)
	}
	for outcome, want := range map[string]float64{"allowed": 2, "denied": 1} {
		if n := v.metric(t, "floodgate_decisions_total", map[string]string{"gate": "rls", "policy": "small", "outcome": outcome}); n != want {
			t.Errorf("decisions{small,%s} = %v, want %v", outcome, n, want)
		}
	}
}

// An invalid hit is the caller's fault: an error, no failure mode, no
// store error counted, nothing recorded.
func TestInvalidHitIsAnErrorNotAStoreFailure(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "bad"})
	r := rule("r", 5)
	for _, h := range []floodgate.Hit{{Rule: r, Key: "k", Cost: 6}, {Rule: r, Key: ""}, {Rule: r, Key: "k", Cost: -1}} {
		res, err := g.Check(t.Context(), []enforce.Hit{{Hit: h, Failure: enforce.FailOpen}})
		if !errors.Is(err, floodgate.ErrInvalidHit) {
			t.Errorf("hit %+v: err = %v, want ErrInvalidHit", h, err)
		}
		if res.Outcome != enforce.FailedClosed || res.Allowed() || res.Err != err {
			t.Errorf("hit %+v: result %+v, want failed_closed with the error: refused, even on a fail-open gate", h, res)
		}
	}
	if n := v.metric(t, "floodgate_store_errors_total", nil) + v.metric(t, "floodgate_decisions_total", nil); n != 0 {
		t.Errorf("%v store errors and decisions counted, want none", n)
	}
	res, err := g.Check(t.Context(), []enforce.Hit{{Hit: floodgate.Hit{Rule: r, Key: "k", Cost: 5}}})
	if err != nil || res.Decision.Remaining != 0 {
		t.Errorf("a full-cost hit after the refused ones: %v, remaining %d; want 0 (nothing recorded before)", err, res.Decision.Remaining)
	}
}

// A fail-closed client waits at least MinFailRetryAfter, and the breaker's
// remaining open time when that is longer.
func TestFailRetryAfter(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	fault := faultstore.New(ms)
	fault.Set(faultstore.Fail)
	for _, cooldown := range []time.Duration{time.Second, time.Minute} {
		bs, err := breakerstore.New(fault, breakerstore.Options{Failures: 1, Cooldown: cooldown})
		if err != nil {
			t.Fatal(err)
		}
		lim, _ := floodgate.New(bs, floodgate.Options{})
		e, err := enforce.New(enforce.Options{Limiter: lim, Breaker: bs})
		if err != nil {
			t.Fatal(err)
		}
		g, _ := e.Gate(enforce.Spec{Name: "g", Limits: []enforce.Limit{{Rule: rule("r", 1)}}, Failure: enforce.FailClosed})
		first, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})) // opens the breaker
		res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
		e.Close()
		if first.FailRetryAfter() != enforce.MinFailRetryAfter {
			t.Errorf("cooldown %v: a plain store error asks %v, want %v", cooldown, first.FailRetryAfter(), enforce.MinFailRetryAfter)
		}
		want := max(enforce.MinFailRetryAfter, cooldown)
		if got := res.FailRetryAfter(); got > want || got < want-time.Second {
			t.Errorf("cooldown %v: breaker open asks %v, want about %v", cooldown, got, want)
		}
		if res.Outcome != enforce.FailedClosed || !errors.Is(res.Err, breakerstore.ErrOpen) {
			t.Errorf("cooldown %v: %v (%v), want failed_closed by the open breaker", cooldown, res.Outcome, res.Err)
		}
	}
}

// One rule name means one rule across the gates of an Enforcer; Validate
// lists the problems of a spec and claims nothing.
func TestGateRefusesWhatItCannotEnforce(t *testing.T) {
	v := newEnv(t)
	v.gate(t, enforce.Spec{Name: "first", Limits: []enforce.Limit{{Rule: rule("login", 5)}}})
	if err := v.e.Validate(enforce.Spec{Name: "probe", Limits: []enforce.Limit{{Rule: rule("fresh", 7)}}}); err != nil {
		t.Fatal(err)
	}
	// Validate claimed nothing: "fresh" may still take other parameters.
	v.gate(t, enforce.Spec{Name: "second", Limits: []enforce.Limit{{Rule: rule("fresh", 9)}}})
	_, err := v.e.Gate(enforce.Spec{Name: "bad name!", Failure: 7, MaxDelay: -1, MaxWaiters: -1,
		Limits: []enforce.Limit{{Rule: rule("login", 6)}, {Rule: rule("x", 1)}, {Rule: rule("x", 1)}, {Rule: floodgate.Rule{Name: "zero"}}}})
	if !errors.Is(err, enforce.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`rule "login" is login`, "rule x appears twice", "limit 3", "name must be", "unknown failure mode 7", "MaxDelay -1ns", "MaxWaiters -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), enforce.ErrInvalid.Error()); n != 7 {
		t.Errorf("%d problems listed, want 7:\n%v", n, err)
	}
	// The refused gate claimed nothing either: "x" is free.
	v.gate(t, enforce.Spec{Name: "third", Limits: []enforce.Limit{{Rule: rule("x", 3)}}})
}

// A limit with no key skips the request, counted every time and logged
// once; shadow limits never deny, and count what they would do.
func TestSkipsAndShadows(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "api", Limits: []enforce.Limit{{Rule: rule("user", 1)}, {Rule: rule("new", 1), Shadow: true}}})
	var shadowAllowed []bool
	for range 3 {
		res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"", "ip"}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != enforce.Skipped || !res.Allowed() || len(res.Shadow) != 1 {
			t.Fatalf("outcome %v, %d shadow decisions; want skipped, allowed, 1", res.Outcome, len(res.Shadow))
		}
		shadowAllowed = append(shadowAllowed, res.Shadow[0].Allowed)
		if e := res.Each; len(e) != 1 || e[0].Hit.Rule.Name != "new" || e[0].Hit.Key != "ip" || e[0].Decision.Allowed != res.Shadow[0].Allowed || e[0].Decision.Remaining != res.Shadow[0].Remaining {
			t.Errorf("verdicts %+v; want the shadow hit's alone, on new and ip", e)
		}
	}
	if fmt.Sprint(shadowAllowed) != "[true false false]" {
		t.Errorf("shadow decisions %v, want [true false false]", shadowAllowed)
	}
	for labels, want := range map[[2]string]float64{{"new", "shadow_allowed"}: 1, {"new", "shadow_denied"}: 2, {"", "skipped"}: 0} {
		if n := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": labels[0], "outcome": labels[1]}); n != want {
			t.Errorf("decisions{%s,%s} = %v, want %v", labels[0], labels[1], n, want)
		}
	}
	if n := v.metric(t, "floodgate_skipped_limits_total", map[string]string{"gate": "api", "policy": "user"}); n != 3 {
		t.Errorf("skipped = %v, want 3", n)
	}
	if n := strings.Count(v.logs.String(), "skipped a request"); n != 1 {
		t.Errorf("%d skip log lines, want 1:\n%s", n, v.logs)
	}
	// With both keys, the enforced limit decides and the shadow one rides along.
	res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"u", "ip"}))
	if res.Outcome != enforce.Allowed || res.Decision.Policy != "user" || len(res.Shadow) != 1 || res.Shadow[0].Allowed {
		t.Errorf("both keys: %v by %s, shadow %+v; want allowed by user, shadow denied", res.Outcome, res.Decision.Policy, res.Shadow)
	}
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"u", "ip"})); res.Outcome != enforce.Denied || res.Shadow != nil {
		t.Errorf("over the enforced limit: %v, shadow %v; want denied, no shadow check", res.Outcome, res.Shadow)
	}
}

// Refund undoes the named policies only, once.
func TestRefundByPolicy(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "login", Limits: []enforce.Limit{{Rule: rule("ip", 3)}, {Rule: rule("acct", 3)}}})
	ctx := context.Background()
	res, _ := g.Check(ctx, g.Hits(ctx, []string{"1.2.3.4", "alice"}))
	for range 2 {
		if err := res.Refund(ctx, "acct"); err != nil {
			t.Fatal(err)
		}
	}
	next, _ := g.Check(ctx, g.Hits(ctx, []string{"1.2.3.4", "alice"}))
	each := fields.Each(next.Decision)
	if each[0].Remaining != 1 || each[1].Remaining != 2 {
		t.Errorf("after refunding acct twice: ip %d left, acct %d left; want 1 and 2", each[0].Remaining, each[1].Remaining)
	}
	denied := enforce.Result{Outcome: enforce.Denied}
	if err := denied.Refund(ctx); err != nil {
		t.Errorf("refund of a denial: %v", err)
	}
}
