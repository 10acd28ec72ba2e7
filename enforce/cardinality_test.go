package enforce_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/enforce"
)

// Rules that come with each request (an RLS caller's per-descriptor limit
// overrides name a rule after the descriptor's keys) must not let a
// client create metric series without bound: past MaxPolicyLabels
// request-borne policies, a gate counts the rest under the policy
// "(other)", and says so once. Every decision is still counted.
func TestRequestBornePoliciesAreBounded(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "rls-domain", Limits: []enforce.Limit{{Rule: rule("configured", 5)}}})
	n := enforce.MaxPolicyLabels + 50
	for i := range n {
		if _, err := g.Check(t.Context(), []enforce.Hit{hit(rule(fmt.Sprintf("override-%d", i), 5), "k", enforce.FailOpen)}); err != nil {
			t.Fatal(err)
		}
	}
	policies := map[string]bool{}
	mfs, err := v.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" {
					policies[l.GetValue()] = true
				}
			}
		}
	}
	// "", the Spec's own, the first MaxPolicyLabels, and "(other)".
	if want := enforce.MaxPolicyLabels + 3; len(policies) != want {
		t.Errorf("%d policy label values, want %d", len(policies), want)
	}
	if got := v.metric(t, "floodgate_decisions_total", map[string]string{"outcome": "allowed"}); got != float64(n) {
		t.Errorf("%v decisions counted, want %d", got, n)
	}
	if got := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": "(other)", "outcome": "allowed"}); got != 50 {
		t.Errorf("%v decisions counted under (other), want 50", got)
	}
	if got := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": "configured"}); got != 0 {
		t.Errorf("the Spec's own policy counted %v, want 0 (bound, never a request's)", got)
	}
	if c := strings.Count(v.logs.String(), "(other)"); c != 1 {
		t.Errorf("the bound was logged %d times, want once:\n%s", c, v.logs.String())
	}
}
