package enforce_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// A key longer than bounds.KeyLen is the request's input, not the
// caller's bug: Decide limits it (by a digest, as httplimit and grpclimit
// do) rather than returning an error beside a zero Result that reports
// Allowed, which the caller's `if err == nil && !res.Allowed()` admits.
func TestDecideLimitsAnOverlongKey(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: rule("long-key", 1)}}, Failure: enforce.FailClosed})
	long := strings.Repeat("t", bounds.KeyLen+1)
	for i, want := range []bool{true, false} {
		res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{long}))
		if err != nil || res.Allowed() != want {
			t.Fatalf("decision %d on a %d-byte key: allowed %v, err %v; want allowed %v, no error", i, len(long), res.Allowed(), err, want)
		}
	}
	other := strings.Repeat("t", bounds.KeyLen) + "u"
	if res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{other})); err != nil || !res.Allowed() {
		t.Fatalf("another long key: allowed %v, err %v; want its own count", res.Allowed(), err)
	}
}
