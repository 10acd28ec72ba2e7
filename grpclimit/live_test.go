package grpclimit_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

var _ floodgate.Overrides = (*rlconfig.Rules)(nil)

// source gives the rules of its map by key.
type source map[string]floodgate.Rule

func (s source) Override(_ floodgate.Rule, key string) (floodgate.Rule, bool) {
	r, ok := s[key]
	return r, ok
}

// Under live rules (the Interceptors's overrides), a call is decided by the
// rule the source gives for the key, and reported so; other keys get the
// limit's own rule.
func TestLiveRules(t *testing.T) {
	live := source{
		"alice":   rule(t, "user", 1, time.Minute),
		"mallory": rule(t, "other-name", 1, time.Minute), // under the limit's own name: the state is user's
		"carol":   rule(t, "user", 1, 10*time.Minute),
	}
	e := newEnv(t, envOptions{overrides: live})
	user := grpclimit.Limit{Rule: rule(t, "user", 3, time.Minute), Key: grpclimit.Principal}
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{user}},
		unaryCall: {Opaque: true, Limits: []grpclimit.Limit{user}},
	}})
	for _, step := range []struct {
		user         string
		code         codes.Code
		policy, left string
	}{
		{"alice", codes.OK, `"user";q=1;w=60`, `"user";r=0;t=60`},
		{"alice", codes.ResourceExhausted, `"user";q=1;w=60`, `"user";r=0;t=60`},
		{"bob", codes.OK, `"user";q=3;w=60`, `"user";r=2;t=60`},
		{"mallory", codes.OK, `"user";q=1;w=60`, `"user";r=0;t=60`},
	} {
		a := empty(t, c, withMD(userKey, step.user))
		if a.st.Code() != step.code {
			t.Fatalf("%s: %v, want %v", step.user, a.err, step.code)
		}
		if got := a.field(t, grpclimit.MetadataRateLimitPolicy); got != step.policy {
			t.Errorf("%s: ratelimit-policy %q, want %q", step.user, got, step.policy)
		}
		if got := a.field(t, grpclimit.MetadataRateLimit); got != step.left {
			t.Errorf("%s: ratelimit %q, want %q", step.user, got, step.left)
		}
		if step.code != codes.OK && (len(a.quota) != 1 || a.quota[0].GetQuotaValue() != 1) {
			t.Errorf("%s's denial: violations %v, want one of quota_value 1", step.user, a.quota)
		}
	}
	// An opaque method waits for the longest window in force: carol's
	// live rule has 10 minutes where the method's has one.
	ctx := withMD(userKey, "carol")
	if _, err := c.UnaryCall(ctx, new(testpb.SimpleRequest)); err != nil {
		t.Fatal(err)
	}
	_, err := c.UnaryCall(ctx, new(testpb.SimpleRequest))
	if a := newAnswer(err, nil); a.st.Code() != codes.ResourceExhausted || a.retry != 10*time.Minute {
		t.Errorf("carol's opaque denial: %v, RetryInfo %v; want ResourceExhausted, 10m0s", err, a.retry)
	}
}
