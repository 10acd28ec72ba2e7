package enforce_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
)

// windowSource gives every key its base rule with the window it holds.
type windowSource struct{ window atomic.Int64 }

func (s *windowSource) Override(base floodgate.Rule, _ string) (floodgate.Rule, bool) {
	base.Window = time.Duration(s.window.Load())
	return base, true
}

// A refund credits the rule the hit was taken under, even when the live
// rule changed its window between the take and the refund: the minute's
// count is given back, and the hour's, never taken, is not credited.
func TestRefundAfterTheLiveWindowChanged(t *testing.T) {
	src := &windowSource{}
	src.window.Store(int64(time.Minute))
	v := newEnvOverridden(t, src)
	g := v.gate(t, enforce.Spec{Name: "live-refund", Limits: []enforce.Limit{{Rule: rule("live-refund", 1)}}})
	res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	if err != nil || !res.Allowed() || res.Decision.Window != time.Minute {
		t.Fatalf("first take: %+v, %v; want allowed under the minute", res.Decision, err)
	}
	src.window.Store(int64(time.Hour))
	if err := res.Refund(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} { // the hour's own count: 1, untouched by the refund
		if got, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); err != nil || got.Allowed() != want {
			t.Fatalf("take %d under the hour: allowed %v, %v; want %v", i, got.Allowed(), err, want)
		}
	}
	src.window.Store(int64(time.Minute))
	if got, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); err != nil || !got.Allowed() || got.Decision.Remaining != 0 {
		t.Fatalf("take under the minute again: %+v, %v; want allowed (the refund gave the minute back), 0 left", got.Decision, err)
	}
}
