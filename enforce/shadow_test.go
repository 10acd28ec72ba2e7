package enforce_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
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
	if len(res.Shadow) != 1 || res.Shadow[0].Policy != "sb-c" || !res.Covers("sb-c", "k") || res.Covers("sb-b", "k") {
		t.Errorf("shadow decisions %+v; want sb-c's alone, after the invalid sb-b", res.Shadow)
	}
	if n := v.metric(t, "floodgate_decisions_total", map[string]string{"policy": "sb-c", "outcome": "shadow_allowed"}); n != 1 {
		t.Errorf("sb-c counted %v shadow_allowed, want 1", n)
	}
}
