package rls_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestGlobalShadowMode is envoyproxy/ratelimit's SHADOW_MODE: every
// limit, blocked ones and a request's own limit override included, is
// counted and never denies (upstream answers OK whatever the limits say).
func TestGlobalShadowMode(t *testing.T) {
	svc := start(t, setup{shadow: true, store: freshRedis(t), yaml: `domain: sh
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: list
    rate_limits: [{window: 1h, requests_per_unit: 2, algorithm: sliding_window}]
`})
	for i := range 3 {
		resp := svc.call(t, req("sh", desc("user=u"), desc("banned=b"), desc("list=l"), peekDesc("user=u")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}, nil)
		if h := header(resp, "Retry-After"); h != "" {
			t.Errorf("call %d: Retry-After %q in shadow mode", i+1, h)
		}
	}
	for label, want := range map[string]float64{"sh.user": 2, "sh.banned": 3, "sh.list": 1} {
		if got := counter(t, svc.reg, "floodgate_rls_shadow_mode_total", map[string]string{"domain": "sh", "limit": label, "descriptor": ""}); got != want {
			t.Errorf("shadow_mode{limit=%s} %v, want %v", label, got, want)
		}
	}
	o := desc("user=o")
	o.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	for range 2 {
		expect(t, svc.call(t, req("sh", o)), ok, []rlsv3.RateLimitResponse_Code{ok}, nil)
	}
	if got := counter(t, svc.reg, "floodgate_rls_shadow_mode_total", map[string]string{"domain": "sh", "limit": "sh.override", "descriptor": ""}); got != 1 {
		t.Errorf("shadow_mode{limit=sh.override} %v, want 1", got)
	}
}

// TestShadowBeyondCapacity: a hits_addend beyond a shadow_mode limit's
// capacity is over that limit, counted as such, and lets the request
// through; beyond an enforced limit's, the request is OVER_LIMIT.
func TestShadowBeyondCapacity(t *testing.T) {
	for _, global := range []bool{false, true} {
		svc := start(t, setup{shadow: global, store: freshRedis(t), yaml: `domain: sb
descriptors:
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: trial2
    shadow_mode: true
    rate_limits: [{window: 1h, requests_per_unit: 5, algorithm: sliding_window}]
  - key: real
    rate_limit: {unit: hour, requests_per_unit: 50}
`})
		r := req("sb", desc("trial=a"), desc("trial2=a"), desc("real=a"))
		r.HitsAddend = 10
		resp, err := svc.client.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatalf("shadow %v: %v", global, err)
		}
		if resp.GetOverallCode() != ok {
			t.Errorf("shadow %v: overall %v, want OK", global, resp.GetOverallCode())
		}
		for label, want := range map[string]float64{"sb.trial": 10, "sb.trial2": 10} {
			if got := counter(t, svc.reg, "floodgate_rls_shadow_mode_total", map[string]string{"domain": "sb", "limit": label, "descriptor": ""}); got != want {
				t.Errorf("shadow %v: shadow_mode{limit=%s} %v, want %v", global, label, got, want)
			}
		}
		// The enforced limit counted its 10 (unless shadowed too).
		wantLeft := uint32(40)
		if st := resp.GetStatuses()[2]; !global && st.GetLimitRemaining() != wantLeft {
			t.Errorf("real=a: limit_remaining %d, want %d", st.GetLimitRemaining(), wantLeft)
		}
		if !global {
			big := req("sb", desc("real=b"))
			big.HitsAddend = 51
			if resp, err := svc.client.ShouldRateLimit(context.Background(), big); err != nil || resp.GetOverallCode() != over {
				t.Errorf("51 on an enforced limit of 50: %v, %v; want OVER_LIMIT", resp.GetOverallCode(), err)
			}
		}
	}
}
