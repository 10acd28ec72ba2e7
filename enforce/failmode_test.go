package enforce_test

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// A hit built by hand with a failure mode that does not exist (a value
// from an unchecked configuration) is the caller's error, refused whether
// or not the store answers, never silently FailOpen while the store is
// down. Nothing is recorded or counted.
func TestUnknownFailureModeIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode faultstore.Mode
	}{{"store up", faultstore.Pass}, {"store down", faultstore.Fail}} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			g := v.gate(t, enforce.Spec{Name: "modes"})
			r := rule("r", 1)
			v.fault.Set(tc.mode)
			bad := []enforce.Hit{hit(r, "k", enforce.FailOpen), hit(r, "other", enforce.FailureMode(7))}
			res, err := g.Check(t.Context(), bad)
			if !errors.Is(err, enforce.ErrInvalid) || res.Outcome != enforce.FailedClosed || res.Allowed() {
				t.Errorf("Check with mode 7: %v (allowed %v), %v; want failed_closed and an error wrapping ErrInvalid", res.Outcome, res.Allowed(), err)
			}
			if n := v.metric(t, "floodgate_store_errors_total", nil) + v.metric(t, "floodgate_decisions_total", nil); n != 0 {
				t.Errorf("%v store errors and decisions counted, want none", n)
			}
			v.fault.Set(faultstore.Pass)
			if res, err := g.Check(t.Context(), []enforce.Hit{hit(r, "k", enforce.FailClosed)}); err != nil || !res.Allowed() {
				t.Errorf("the valid hit afterwards: %v, %v; want allowed (nothing was recorded)", res.Outcome, err)
			}
		})
	}
}
