package enforce_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// A shadow hit the core refuses (a cost above its capacity) is the
// caller's input, not a store failure: it is not counted in
// floodgate_store_errors_total, and the shadow hits after it are still
// checked.
func TestInvalidShadowHitIsNotAStoreFailure(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "shadow-bad"})
	a, b, c := rule("sb-a", 5), rule("sb-b", 5), rule("sb-c", 5)
	res, err := g.Check(t.Context(), []enforce.Hit{
		{Hit: floodgate.Hit{Rule: a, Key: "k"}},
		{Hit: floodgate.Hit{Rule: b, Key: "k", Cost: 6}, Shadow: true},
		{Hit: floodgate.Hit{Rule: c, Key: "k"}, Shadow: true},
	})
	if err != nil || res.Outcome != enforce.Allowed {
		t.Fatalf("Check: %v, %v; want allowed", res.Outcome, err)
	}
	if n := v.metric(t, "floodgate_store_errors_total", nil); n != 0 {
		t.Errorf("%v store errors counted for an invalid shadow hit, want 0", n)
	}
	if len(res.Shadow) != 1 || res.Shadow[0].Policy != "sb-c" || res.Each[2].Decision.Policy != "sb-c" || res.Each[1].Decision.Policy != "" {
		t.Errorf("shadow decisions %+v; want sb-c's alone, after the invalid sb-b", res.Shadow)
	}
	if n := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": "sb-c", "outcome": "shadow_allowed"}); n != 1 {
		t.Errorf("sb-c counted %v shadow_allowed, want 1", n)
	}
}

// A request with shadow hits only, whose store fails, is counted once,
// failed_open (it went through because the store failed), and logged with
// the degraded decisions; its Result is Skipped (nothing was enforced)
// with the store's error. It was counted nowhere but in
// floodgate_store_errors_total, and not logged.
func TestShadowOnlyOutageIsCounted(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "shadow-out"})
	v.fault.Set(faultstore.Fail)
	hits := []enforce.Hit{
		{Hit: floodgate.Hit{Rule: rule("so-a", 5), Key: "k"}, Shadow: true},
		{Hit: floodgate.Hit{Rule: rule("so-b", 5), Key: "k"}, Shadow: true},
	}
	for _, peek := range []bool{false, true} {
		hs := slices.Clone(hits)
		for i := range hs {
			hs[i].Peek = peek
		}
		res, err := g.Check(t.Context(), hs)
		if err != nil || res.Outcome != enforce.Skipped || !errors.Is(res.Err, faultstore.ErrInjected) || len(res.Shadow) != 0 {
			t.Fatalf("peek %v: %v, %v, Err %v, %d shadow decisions; want Skipped with the store's error and none", peek, res.Outcome, err, res.Err, len(res.Shadow))
		}
	}
	for outcome, want := range map[string]float64{"failed_open": 2, "skipped": 0, "shadow_allowed": 0} {
		if n := v.metric(t, "floodgate_decisions_total", map[string]string{"gate": "shadow-out", "policy": "", "outcome": outcome}); n != want {
			t.Errorf("decisions %s = %v, want %v", outcome, n, want)
		}
	}
	if n := v.metric(t, "floodgate_decisions_total", map[string]string{"gate": "shadow-out"}); n != 2 {
		t.Errorf("decisions = %v in all, want 2: one per request", n)
	}
	if n := v.metric(t, "floodgate_store_errors_total", map[string]string{"gate": "shadow-out"}); n != 2 {
		t.Errorf("store errors = %v, want 2: the first shadow hit of each request, the second not asked", n)
	}
	if l := v.logs.String(); !strings.Contains(l, "gate=shadow-out failure_mode=open outcome=failed_open") {
		t.Errorf("no degraded-decision line for the shadow-only request:\n%s", l)
	}
}
