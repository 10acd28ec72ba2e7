package enforce_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

// A verdict is decided only for the hits that a limiter counted: none
// when the store failed open or closed, and only the local ones when the
// local limits decided, so that a nested check (httplimit's) does not skip
// a hit nobody counted.
func TestCoversOnlyCountedHits(t *testing.T) {
	a, b := rule("cov-a", 5), rule("cov-b", 5)
	cases := []struct {
		name         string
		modes        [2]enforce.FailureMode
		outcome      enforce.Outcome
		coverA, covB bool
	}{
		{"failed open", [2]enforce.FailureMode{enforce.FailOpen, enforce.FailOpen}, enforce.FailedOpen, false, false},
		{"failed closed", [2]enforce.FailureMode{enforce.FailClosed, enforce.FailLocal}, enforce.FailedClosed, false, false},
		{"local counts its own hits", [2]enforce.FailureMode{enforce.FailOpen, enforce.FailLocal}, enforce.Local, false, true},
		{"all local", [2]enforce.FailureMode{enforce.FailLocal, enforce.FailLocal}, enforce.Local, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			g := v.gate(t, enforce.Spec{Name: "covers"})
			v.fault.Set(faultstore.Fail)
			res, err := g.Check(t.Context(), []enforce.Hit{hit(a, "k", tc.modes[0]), hit(b, "k", tc.modes[1])})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.outcome {
				t.Fatalf("outcome %v, want %v", res.Outcome, tc.outcome)
			}
			if got := res.Each[0].Decision.Policy != ""; got != tc.coverA {
				t.Errorf("cov-a decided = %v, want %v", got, tc.coverA)
			}
			if got := res.Each[1].Decision.Policy != ""; got != tc.covB {
				t.Errorf("cov-b decided = %v, want %v", got, tc.covB)
			}
		})
	}
}
