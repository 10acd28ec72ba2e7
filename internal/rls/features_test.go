package rls_test

import (
	"math"
	"regexp"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/memstore"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// featureConfig has one descriptor per feature of the format.
const featureConfig = `
domain: feat
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: "api/*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: nested
    value: vip
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: nested
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: multi
    rate_limits:
      - {unit: hour, requests_per_unit: 10}
      - {window: 90s, requests_per_unit: 2}
  - key: multi2
    rate_limits:
      - {window: 90s, requests_per_unit: 2}
      - {unit: hour, requests_per_unit: 10}
  - key: mixed
    rate_limits:
      - {unit: hour, requests_per_unit: 10}
      - {unit: minute, requests_per_unit: 1, shadow_mode: true}
  - key: shadows
    shadow_mode: true
    rate_limits:
      - {unit: minute, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: generic
    rate_limit: {name: generic, unit: minute, requests_per_unit: 1}
  - key: special
    rate_limit: {name: special, unit: minute, requests_per_unit: 3, replaces: [{name: generic}]}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: odd
    rate_limit: {window: 1500ms, requests_per_unit: 5}
`

// expect checks a response's overall code and, per status, its code and
// limit_remaining.
func expect(t *testing.T, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, codes []rlsv3.RateLimitResponse_Code, remaining []uint32) {
	t.Helper()
	if resp.GetOverallCode() != overall {
		t.Errorf("overall_code %v, want %v (%v)", resp.GetOverallCode(), overall, resp)
	}
	if len(resp.GetStatuses()) != len(codes) {
		t.Fatalf("%d statuses, want %d (%v)", len(resp.GetStatuses()), len(codes), resp)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != codes[i] {
			t.Errorf("status %d: code %v, want %v", i, st.GetCode(), codes[i])
		}
		if remaining != nil && st.GetLimitRemaining() != remaining[i] {
			t.Errorf("status %d: limit_remaining %d, want %d", i, st.GetLimitRemaining(), remaining[i])
		}
	}
}

func TestFeatures(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: freshRedis(t)})

	t.Run("fixed window, figures and headers", func(t *testing.T) {
		for i, want := range []uint32{2, 1, 0} {
			resp := svc.call(t, req("feat", desc("plain=a")))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{want})
			if got := header(resp, "Retry-After"); got != "" {
				t.Errorf("call %d allowed with Retry-After %q", i, got)
			}
		}
		resp := svc.call(t, req("feat", desc("plain=a")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		st := resp.GetStatuses()[0]
		if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.GetUnitMultiplier() != nil {
			t.Errorf("current_limit %v, want 3 per MINUTE", cl)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("duration_until_reset %v, want within (0, 1m]", d)
		}
		if p := header(resp, "RateLimit-Policy"); !regexp.MustCompile(`^"feat\.plain";q=3;w=60$`).MatchString(p) {
			t.Errorf("RateLimit-Policy %q", p)
		}
		if q := header(resp, "RateLimit"); !regexp.MustCompile(`^"feat\.plain";r=0;t=([1-9]|[1-5][0-9]|60)$`).MatchString(q) {
			t.Errorf("RateLimit %q", q)
		}
		if ra := header(resp, "Retry-After"); !regexp.MustCompile(`^([1-9]|[1-5][0-9]|60)$`).MatchString(ra) {
			t.Errorf("Retry-After %q, want 1 to 60 seconds", ra)
		}
		// Another value is counted apart.
		expect(t, svc.call(t, req("feat", desc("plain=b"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{2})
	})

	t.Run("request hits_addend", func(t *testing.T) {
		r := req("feat", desc("plain=c"))
		r.HitsAddend = 2
		expect(t, svc.call(t, r), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{1})
		// 1 left: a request of 2 is denied and records nothing.
		expect(t, svc.call(t, r), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{1})
		expect(t, svc.call(t, req("feat", desc("plain=c"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	})

	t.Run("identical descriptors count together", func(t *testing.T) {
		expect(t, svc.call(t, req("feat", desc("plain=d"), desc("plain=d"))), ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{1, 1})
		expect(t, svc.call(t, req("feat", desc("plain=d"), desc("plain=d"))), over, []rlsv3.RateLimitResponse_Code{over, over}, []uint32{1, 1})
	})

	t.Run("wildcard value, counted per value, before the key alone", func(t *testing.T) {
		for _, want := range []uint32{1, 0} {
			expect(t, svc.call(t, req("feat", desc("path=api/v1"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{want})
		}
		expect(t, svc.call(t, req("feat", desc("path=api/v1"))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		expect(t, svc.call(t, req("feat", desc("path=api/v2"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{1})
		resp := svc.call(t, req("feat", desc("path=web")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{4})
		if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
			t.Errorf("path=web under the key-only limit of %d, want 5", got)
		}
	})

	t.Run("nested, the most specific match", func(t *testing.T) {
		resp := svc.call(t, req("feat", desc("nested=vip", "user=u")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{3})
		if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 4 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("vip: current_limit %v, want 4 per HOUR", cl)
		}
		expect(t, svc.call(t, req("feat", desc("nested=other", "user=u"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		expect(t, svc.call(t, req("feat", desc("nested=other", "user=u"))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		// Fewer entries than the limit is deep: no limit.
		resp = svc.call(t, req("feat", desc("nested=vip")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		if resp.GetStatuses()[0].GetCurrentLimit() != nil || len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("a descriptor without a limit got %v", resp)
		}
	})

	t.Run("unlimited", func(t *testing.T) {
		for range 5 {
			resp := svc.call(t, req("feat", desc("free=x")))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{math.MaxUint32}) // as envoyproxy/ratelimit answers
			if resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("unlimited: current_limit %v", resp.GetStatuses()[0].GetCurrentLimit())
			}
		}
	})

	t.Run("shadow mode counts and never denies", func(t *testing.T) {
		labels := map[string]string{"domain": "feat", "limit": "feat.shadow", "descriptor": ""}
		expect(t, svc.call(t, req("feat", desc("shadow=x"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		for range 2 {
			resp := svc.call(t, req("feat", desc("shadow=x")))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
			if header(resp, "Retry-After") != "" || header(resp, "RateLimit") != "" {
				t.Errorf("a shadow limit shows in the headers: %v", resp.GetResponseHeadersToAdd())
			}
		}
		for name, want := range map[string]float64{"floodgate_rls_total_hits_total": 3, "floodgate_rls_within_limit_total": 1, "floodgate_rls_over_limit_total": 2, "floodgate_rls_shadow_mode_total": 2} {
			if got := counter(t, svc.reg, name, labels); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	})

	t.Run("rate_limits, checked together, the worst reported", func(t *testing.T) {
		resp := svc.call(t, req("feat", desc("multi=x")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{1})
		cl := resp.GetStatuses()[0].GetCurrentLimit()
		if cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 90 {
			t.Errorf("current_limit %v, want 2 per SECOND x 90", cl)
		}
		if p := header(resp, "RateLimit-Policy"); !regexp.MustCompile(`^"feat\.multi";q=10;w=3600, "feat\.multi#2";q=2;w=90$`).MatchString(p) {
			t.Errorf("RateLimit-Policy %q, want both limits", p)
		}
		expect(t, svc.call(t, req("feat", desc("multi=x"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		resp = svc.call(t, req("feat", desc("multi=x")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		if q := header(resp, "RateLimit"); !regexp.MustCompile(`^"feat\.multi";r=8;t=\d+, "feat\.multi#2";r=0;t=\d+$`).MatchString(q) {
			t.Errorf("RateLimit %q: the hour limit keeps 8 (the denied request recorded nothing)", q)
		}
	})

	t.Run("the worst limit is reported, wherever it is listed", func(t *testing.T) {
		for _, c := range []struct {
			kv        string
			rpu       uint32
			remaining uint32
		}{
			{"multi2=x", 2, 0},  // the first limit is the worst
			{"mixed=x", 10, 8},  // a shadow limit is not reported beside an enforced one
			{"shadows=x", 1, 0}, // only shadow limits: the worst of them, never over
		} {
			svc.call(t, req("feat", desc(c.kv)))
			resp := svc.call(t, req("feat", desc(c.kv)))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{c.remaining})
			if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != c.rpu {
				t.Errorf("%s: current_limit of %d, want %d", c.kv, got, c.rpu)
			}
		}
	})

	t.Run("requests_per_unit 0 blocks", func(t *testing.T) {
		resp := svc.call(t, req("feat", desc("blocked=x")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 0 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Errorf("current_limit %v", cl)
		}
		if ra := header(resp, "Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1", ra)
		}
	})

	t.Run("replaces", func(t *testing.T) {
		for range 2 {
			resp := svc.call(t, req("feat", desc("generic=x"), desc("special=x")))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, nil)
			if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl != nil {
				t.Errorf("the replaced limit still reported: %v", cl)
			}
			if cl := resp.GetStatuses()[1].GetCurrentLimit(); cl.GetName() != "special" || cl.GetRequestsPerUnit() != 3 {
				t.Errorf("current_limit %v, want special, 3", cl)
			}
		}
		// Alone, generic holds.
		expect(t, svc.call(t, req("feat", desc("generic=x"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		expect(t, svc.call(t, req("feat", desc("generic=x"))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	})

	t.Run("detailed_metric labels the descriptor", func(t *testing.T) {
		svc.call(t, req("feat", desc("detailed=alice")))
		svc.call(t, req("feat", desc("detailed=alice")))
		labels := map[string]string{"domain": "feat", "limit": "feat.detailed", "descriptor": "feat.detailed_alice"}
		if got := counter(t, svc.reg, "floodgate_rls_over_limit_total", labels); got != 1 {
			t.Errorf("over_limit %v for %v, want 1", got, labels)
		}
		if got := counter(t, svc.reg, "floodgate_rls_near_limit_total", labels); got != 1 {
			t.Errorf("near_limit %v for %v, want 1", got, labels)
		}
		plain := map[string]string{"domain": "feat", "limit": "feat.plain", "descriptor": ""}
		if got := counter(t, svc.reg, "floodgate_rls_total_hits_total", plain); got < 4 {
			t.Errorf("total_hits of feat.plain without descriptor label = %v", got)
		}
	})

	t.Run("token bucket", func(t *testing.T) {
		for _, want := range []uint32{1, 0} {
			expect(t, svc.call(t, req("feat", desc("tb=x"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{want})
		}
		resp := svc.call(t, req("feat", desc("tb=x")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		if ra := header(resp, "Retry-After"); ra != "30" && ra != "29" {
			t.Errorf("Retry-After %q, want 30 (one token every 30s)", ra)
		}
	})

	t.Run("a window no unit divides", func(t *testing.T) {
		resp := svc.call(t, req("feat", desc("odd=x")))
		if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_UNKNOWN || cl.GetRequestsPerUnit() != 5 || cl.GetUnitMultiplier() != nil {
			t.Errorf("current_limit %v, want 5 per UNKNOWN", cl)
		}
	})

	t.Run("limit override", func(t *testing.T) {
		o := func(kv string, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *commonv3.RateLimitDescriptor {
			d := desc(kv)
			d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
			if mult > 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
			}
			return d
		}
		// It replaces the configured 3 a minute, and limits a descriptor
		// that the configuration does not.
		for _, kv := range []string{"plain=o", "zzz=o"} {
			resp := svc.call(t, req("feat", o(kv, 1, typev3.RateLimitUnit_HOUR, 0)))
			expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
			if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 1 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Errorf("%s: current_limit %v, want 1 per HOUR", kv, cl)
			}
			expect(t, svc.call(t, req("feat", o(kv, 1, typev3.RateLimitUnit_HOUR, 0))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		}
		// The configured limit is untouched.
		expect(t, svc.call(t, req("feat", desc("plain=o"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{2})
		resp := svc.call(t, req("feat", o("plain=o2", 5, typev3.RateLimitUnit_MINUTE, 2)))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{4})
		if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.GetUnitMultiplier().GetValue() != 2 {
			t.Errorf("current_limit %v, want 5 per MINUTE x 2", cl)
		}
		expect(t, svc.call(t, req("feat", o("plain=o3", 0, typev3.RateLimitUnit_SECOND, 0))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	})

	t.Run("unknown domain and no match answer OK", func(t *testing.T) {
		resp := svc.call(t, req("nope", desc("plain=a"), desc("x=y")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{0, 0})
		if got := counter(t, svc.reg, "floodgate_rls_unknown_domain_total", map[string]string{}); got != 1 {
			t.Errorf("unknown_domain %v, want 1", got)
		}
		resp = svc.call(t, req("feat", &commonv3.RateLimitDescriptor{Entries: desc("zzz=1").Entries}))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	})
}

// TestAllOrNothing: a denied request records nothing on any descriptor.
func TestAllOrNothing(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: freshRedis(t)})
	// plain: 3 per minute; nested=other/user: 1 per hour.
	both := req("feat", desc("plain=z"), desc("nested=other", "user=z"))
	expect(t, svc.call(t, both), ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{2, 0})
	for range 3 {
		// plain reports what it has left (2): nothing was taken from it.
		expect(t, svc.call(t, both), over, []rlsv3.RateLimitResponse_Code{ok, over}, []uint32{2, 0})
	}
	expect(t, svc.call(t, req("feat", desc("plain=z"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{1})
}

// TestPeek: a descriptor hits_addend of 0 checks and records nothing.
func TestPeek(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: freshRedis(t)})
	for range 3 {
		expect(t, svc.call(t, req("feat", peekDesc("plain=p"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{3})
	}
	expect(t, svc.call(t, req("feat", desc("plain=p"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{2})
	expect(t, svc.call(t, req("feat", peekDesc("plain=p"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{2})
	svc.call(t, req("feat", desc("plain=p")))
	svc.call(t, req("feat", desc("plain=p")))
	resp := svc.call(t, req("feat", peekDesc("plain=p")))
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	if header(resp, "Retry-After") == "" {
		t.Error("an over-limit peek has no Retry-After")
	}
	// A peek over the limit makes the request over it: the other
	// descriptor records nothing.
	expect(t, svc.call(t, req("feat", peekDesc("plain=p"), desc("plain=q"))), over, []rlsv3.RateLimitResponse_Code{over, ok}, []uint32{0, 3})
	expect(t, svc.call(t, req("feat", peekDesc("plain=q"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{3})
	// A peek and a counted hit in one request.
	expect(t, svc.call(t, req("feat", peekDesc("plain=q"), desc("plain=q"))), ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{3, 2})
	if got := counter(t, svc.reg, "floodgate_rls_total_hits_total", map[string]string{"domain": "feat", "limit": "feat.plain", "descriptor": ""}); got != 5 {
		// plain=p 3 times, plain=q twice (once in the denied request).
		t.Errorf("total_hits %v, want 5: peeks add nothing", got)
	}
}

// TestAnyDomainName: a domain that is no valid gate name (a space, a
// colon) is served, its metrics under a gate name with "_" for them.
func TestAnyDomainName(t *testing.T) {
	svc := start(t, setup{yaml: "domain: \"my domain:v1\"\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", store: memstore.New(memstore.Options{})})
	expect(t, svc.call(t, req("my domain:v1", desc("k=v"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	expect(t, svc.call(t, req("my domain:v1", desc("k=v"))), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	if got := counter(t, svc.reg, "floodgate_rls_over_limit_total", map[string]string{"domain": "my domain:v1", "limit": "my domain:v1.k", "descriptor": ""}); got != 1 {
		t.Errorf("over_limit %v, want 1", got)
	}
}
