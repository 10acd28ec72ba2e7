package rls_test

import (
	"context"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// What the service reports is what it enforced: each test here pins a
// figure that the service once derived apart from what enforce decided.

// keyOverrides gives the keys listed a limit of their own, under any rule.
type keyOverrides map[string]int64

func (o keyOverrides) Override(r floodgate.Rule, key string) (floodgate.Rule, bool) {
	n, ok := o[key]
	if !ok {
		return r, false
	}
	r.Limit = n
	return r, true
}

const coherenceConfig = `
domain: co
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    failure_mode: error
  - key: api
    rate_limit: {name: api_per_user, unit: minute, requests_per_unit: 3}
  - key: tenant
    shadow_mode: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// The state key of user=x under domain co, as the service writes it: the
// overrides see it as the hit's key.
const coUserKey = "co/user=x"

// An override is reported as enforced: current_limit, RateLimit-Policy and
// RateLimit give its limit (behaviour 2: 10 were let through while both
// said 7, or the other way round).
func TestOverrideIsReported(t *testing.T) {
	svc := start(t, setup{yaml: coherenceConfig, store: memstore.New(memstore.Options{}), overrides: keyOverrides{coUserKey: 7}})
	for i := range 8 {
		resp := svc.call(t, req("co", desc("user=x")))
		st := resp.GetStatuses()[0]
		wantOK := i < 7
		if (resp.GetOverallCode() == ok) != wantOK {
			t.Fatalf("request %d: %v, want OK only for the first 7", i+1, resp.GetOverallCode())
		}
		if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 7 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("request %d: current_limit %v, want 7 per MINUTE", i+1, cl)
		}
		if want := uint32(max(6-i, 0)); st.GetLimitRemaining() != want {
			t.Fatalf("request %d: limit_remaining %d, want %d", i+1, st.GetLimitRemaining(), want)
		}
		if p := header(resp, "RateLimit-Policy"); p != `"co.user";q=7;w=60` {
			t.Fatalf("request %d: RateLimit-Policy %q, want the override's 7", i+1, p)
		}
	}
	if got := counter(t, svc.reg, "floodgate_decisions_total", map[string]string{"gate": "co", "policy": "co.user", "outcome": "allowed"}); got != 7 {
		t.Errorf("decisions allowed under co.user = %v, want 7", got)
	}
}

// The largest hits_addend admitted is the rule in force's: an override
// that raises the limit raises it (behaviour 3, over RLS: override 100,
// hits_addend 20 was OVER_LIMIT under the configured 10), and one that
// lowers it answers an oversized hits_addend OVER_LIMIT, never an error
// that Envoy would let through (behaviour 4: InvalidArgument).
func TestHitsAddendAgainstTheOverride(t *testing.T) {
	svc := start(t, setup{yaml: coherenceConfig, store: memstore.New(memstore.Options{}),
		overrides: keyOverrides{"co/user=big": 100, "co/user=small": 2}})
	addend := func(value string, n uint64) *commonv3.RateLimitDescriptor {
		d := desc("user=" + value)
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	expect(t, svc.call(t, req("co", addend("big", 5))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{95})
	expect(t, svc.call(t, req("co", addend("big", 20))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{75})
	resp, err := svc.client.ShouldRateLimit(context.Background(), req("co", addend("small", 3)))
	if err != nil {
		t.Fatalf("hits_addend 3 over an override of 2: %v, want OVER_LIMIT, not an error", err)
	}
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 2 {
		t.Errorf("current_limit %v, want the override's 2", cl)
	}
	// Nothing was recorded: the key still has its 2.
	expect(t, svc.call(t, req("co", addend("small", 2))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
}

// Two descriptors with the same entries and different per-request limits
// are two rules, each checked (behaviour 5: they were merged into one hit
// and the second limit was never checked).
func TestDistinctOverridesAreTwoHits(t *testing.T) {
	svc := start(t, setup{yaml: coherenceConfig, store: memstore.New(memstore.Options{})})
	limited := func(n uint32, unit typev3.RateLimitUnit) *commonv3.RateLimitDescriptor {
		d := desc("user=y")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	r := req("co", limited(1, typev3.RateLimitUnit_SECOND), limited(1000, typev3.RateLimitUnit_HOUR))
	resp := svc.call(t, r)
	expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{0, 999})
	if a, b := resp.GetStatuses()[0].GetCurrentLimit(), resp.GetStatuses()[1].GetCurrentLimit(); a.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || b.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("current_limit %v and %v, want per SECOND and per HOUR", a, b)
	}
	resp = svc.call(t, r)
	// The second is within a second of the first, unless the machine
	// stalled past the second's end: then both are admitted again.
	if resp.GetOverallCode() == ok {
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{0, 998})
		return
	}
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over, ok}, []uint32{0, 999})
}

// An error answer is counted as an error, not as fail-closed (behaviour
// 6: failure_mode error was counted failed_closed while Envoy let the
// request through).
func TestErrorFailureModeIsCountedAsError(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: coherenceConfig, store: fs})
	fs.Set(faultstore.Fail)
	for range 3 {
		_, err := svc.client.ShouldRateLimit(context.Background(), req("co", desc("user=z")))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("store down, failure_mode error: %v, want Unavailable", err)
		}
	}
	for outcome, want := range map[string]float64{"error": 3, "failed_closed": 0} {
		if got := counter(t, svc.reg, "floodgate_decisions_total", map[string]string{"gate": "co", "policy": "", "outcome": outcome}); got != want {
			t.Errorf("decisions %s = %v, want %v", outcome, got, want)
		}
	}
	if got := counter(t, svc.reg, "floodgate_rls_requests_total", map[string]string{"code": "unavailable"}); got != 3 {
		t.Errorf("requests unavailable = %v, want 3", got)
	}
}

// A limit's name is its name everywhere: headers, decisions and the RLS
// metrics (behaviour 10: the headers and floodgate_decisions_total used
// the state's rule name, co.api-<digest>).
func TestLimitNameIsReportedEverywhere(t *testing.T) {
	svc := start(t, setup{yaml: coherenceConfig, store: memstore.New(memstore.Options{})})
	var resp *rlsv3.RateLimitResponse
	for range 4 {
		resp = svc.call(t, req("co", desc("api=k")))
	}
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	if p := header(resp, "RateLimit-Policy"); p != `"api_per_user";q=3;w=60` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetName() != "api_per_user" {
		t.Errorf("current_limit name %q", cl.GetName())
	}
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"floodgate_decisions_total", map[string]string{"gate": "co", "policy": "api_per_user", "outcome": "allowed"}, 3},
		{"floodgate_decisions_total", map[string]string{"gate": "co", "policy": "api_per_user", "outcome": "denied"}, 1},
		{"floodgate_rls_over_limit_total", map[string]string{"domain": "co", "limit": "api_per_user", "descriptor": ""}, 1},
		{"floodgate_rls_within_limit_total", map[string]string{"domain": "co", "limit": "api_per_user", "descriptor": ""}, 3},
	} {
		if got := counter(t, svc.reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
}

// shadow_mode on a descriptor without a rate_limit loads, as upstream
// loads it, and is said to do nothing: its child's limit denies
// (behaviour 1: accepted silently).
func TestShadowModeWithoutALimitIsReported(t *testing.T) {
	svc := start(t, setup{yaml: coherenceConfig, store: memstore.New(memstore.Options{})})
	if got := counter(t, svc.reg, "floodgate_config_ignored_settings", map[string]string{}); got != 1 {
		t.Errorf("floodgate_config_ignored_settings = %v, want 1", got)
	}
	ig := svc.srv.Config().Ignored()
	if len(ig) != 1 || !strings.Contains(ig[0], "co.tenant: shadow_mode") {
		t.Errorf("Ignored() = %q, want the shadow_mode of co.tenant", ig)
	}
	r := req("co", desc("tenant=t", "user=u"))
	expect(t, svc.call(t, r), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	expect(t, svc.call(t, r), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
}
