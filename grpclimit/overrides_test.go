package grpclimit_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/overrides"
)

// A key with an override (floodgate.Options.Overrides) is limited, and
// told, by the rule in force; other keys by the method's.
func TestOverridesReported(t *testing.T) {
	set, err := overrides.NewSet(overrides.Entry{Rule: rule(t, "user", 2, 2*time.Minute), Key: "vip"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{overrides: set})
	user := grpclimit.Limit{Rule: rule(t, "user", 1, time.Minute), Key: grpclimit.Principal}
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{emptyCall: {Limits: []grpclimit.Limit{user}}}})
	for _, step := range []struct {
		user   string
		code   codes.Code
		policy string
	}{
		{"vip", codes.OK, `"user";q=2;w=120`},
		{"vip", codes.OK, `"user";q=2;w=120`},
		{"vip", codes.ResourceExhausted, `"user";q=2;w=120`},
		{"bob", codes.OK, `"user";q=1;w=60`},
		{"bob", codes.ResourceExhausted, `"user";q=1;w=60`},
	} {
		a := empty(t, c, withMD(userKey, step.user))
		if a.st.Code() != step.code {
			t.Fatalf("%s: %v, want %v", step.user, a.err, step.code)
		}
		if got := a.field(t, grpclimit.MetadataRateLimitPolicy); got != step.policy {
			t.Errorf("%s: ratelimit-policy %q, want %q", step.user, got, step.policy)
		}
	}
}
