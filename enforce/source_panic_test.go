package enforce_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
)

// panicky is a live-limit source with a bug: it panics for some keys.
type panicky struct{}

func (panicky) Rule(base floodgate.Rule, key string) (floodgate.Rule, bool) {
	if strings.HasPrefix(key, "bad") {
		var m map[string]floodgate.Rule
		m["x"] = base // assignment to a nil map
	}
	base.Limit = 1
	return base, true
}

// A Source that panics is treated as one that gives an unusable rule:
// the limit's own rule applies, the first panic is logged, and nothing
// crashes (gRPC recovers no panic: a Source tripped by a request's key
// would stop the server). Keys it serves normally keep its rule.
func TestPanickingSourceFallsBackToTheRule(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "live", Limits: []enforce.Limit{{Rule: rule("live", 3), Source: panicky{}}}})
	for i, want := range []bool{true, true, true, false} {
		res, err := g.Decide(t.Context(), []string{"bad-key"})
		if err != nil || res.Allowed() != want || res.Decision.Limit != 3 {
			t.Fatalf("request %d of a key the source panics on: %v (limit %d), %v; want allowed %v under the limit's own rule of 3", i, res.Outcome, res.Decision.Limit, err, want)
		}
	}
	if res, _ := g.Decide(t.Context(), []string{"good"}); res.Decision.Limit != 1 || !res.Allowed() {
		t.Errorf("a key the source serves: limit %d, %v; want its rule of 1, allowed", res.Decision.Limit, res.Outcome)
	}
	if n := strings.Count(v.logs.String(), "panicked"); n != 1 || !strings.Contains(v.logs.String(), "nil map") {
		t.Errorf("logs:\n%s\nwant one line about the panic, with its value", v.logs)
	}
}
