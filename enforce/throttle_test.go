package enforce_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
)

// A throttling gate does not wait for quota that comes after the caller's
// deadline (a gRPC call's, typically): like floodgate.Limiter.Wait and
// x/time/rate's WaitN, it answers the denial at once, so that the client
// gets its retry-after instead of DeadlineExceeded after a wasted wait.
// With time to spare, it still waits.
func TestThrottleDoesNotOutwaitTheDeadline(t *testing.T) {
	cases := []struct {
		name     string
		window   time.Duration // the rule allows 1 request per window
		deadline time.Duration // the second request's context
		outcome  enforce.Outcome
		result   string // the floodgate_throttled_total result counted
	}{
		{"the deadline comes first", 10 * time.Second, time.Second, enforce.Denied, "denied"},
		{"quota comes first", 100 * time.Millisecond, 10 * time.Second, enforce.Allowed, "allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			r := floodgate.Rule{Name: "slow", Limit: 1, Window: tc.window}
			g := v.gate(t, enforce.Spec{Name: "slow", Limits: []enforce.Limit{{Rule: r}}, MaxDelay: time.Minute})
			if res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); err != nil || !res.Allowed() {
				t.Fatalf("first request: %v, %v", res.Outcome, err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
			defer cancel()
			start := time.Now()
			res, err := g.Check(ctx, g.Hits(ctx, []string{"k"}))
			took := time.Since(start)
			if err != nil || res.Outcome != tc.outcome {
				t.Fatalf("second request: %v, %v after %v; want %v, no error", res.Outcome, err, took, tc.outcome)
			}
			if tc.outcome == enforce.Denied && (res.Decision.RetryAfter <= tc.deadline || took >= tc.deadline) {
				t.Errorf("denial after %v with retry-after %v; want it at once, the wait being past the deadline %v", took, res.Decision.RetryAfter, tc.deadline)
			}
			for _, result := range []string{"allowed", "denied", "canceled"} {
				want := 0.0
				if result == tc.result {
					want = 1
				}
				if got := v.metric(t, "floodgate_throttled_total", map[string]string{"result": result}); got != want {
					t.Errorf("floodgate_throttled_total{result=%q} = %v, want %v", result, got, want)
				}
			}
		})
	}
}
