package rls_test

import (
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
