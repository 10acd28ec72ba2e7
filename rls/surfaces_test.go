package rls_test

import (
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/memstore"
)

// Every surface of the service reports what was enforced: the gRPC
// answer, /json, the response headers and the metrics (a new user's
// disagreements, each test here failing before its fix but the first).

const bankConfig = `
domain: bank
descriptors:
  - key: route
    value: statement
    descriptors:
      - key: account
        failure_mode: open
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: pix
    failure_mode: closed
    rate_limit: {name: pix, unit: minute, requests_per_unit: 1}
  - key: boleto
    shadow_mode: true
    rate_limit: {name: boleto, unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {name: user, unit: minute, requests_per_unit: 10}
`

const statementPath = "bank.route_statement.account"

// figures are what one limit's series say.
type figures struct{ total, within, over, near, shadow float64 }

func (s *service) figures(t *testing.T, limit string) figures {
	t.Helper()
	l := map[string]string{"domain": "bank", "limit": limit, "descriptor": ""}
	return figures{
		counter(t, s.reg, "floodgate_rls_total_hits_total", l),
		counter(t, s.reg, "floodgate_rls_within_limit_total", l),
		counter(t, s.reg, "floodgate_rls_over_limit_total", l),
		counter(t, s.reg, "floodgate_rls_near_limit_total", l),
		counter(t, s.reg, "floodgate_rls_shadow_mode_total", l),
	}
}

// viaJSON sends r to /json and checks that its answer is the gRPC one,
// want: the same statuses (durations to the second: the two calls are
// apart), and response_headers_to_add as the HTTP headers. It is for
// requests that record nothing, so that both calls see the same state.
func (s *service) viaJSON(t *testing.T, r *rlsv3.RateLimitRequest, want *rlsv3.RateLimitResponse) {
	t.Helper()
	body, err := protojson.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	code, h, got, raw := s.post(t, string(body))
	if wantCode := map[rlsv3.RateLimitResponse_Code]int{ok: http.StatusOK, over: http.StatusTooManyRequests}[want.GetOverallCode()]; code != wantCode {
		t.Fatalf("/json answered %d, want %d: %s", code, wantCode, raw)
	}
	for i, st := range want.GetStatuses() {
		js := got.GetStatuses()[i]
		if js.GetCode() != st.GetCode() || js.GetLimitRemaining() != st.GetLimitRemaining() || !proto.Equal(js.GetCurrentLimit(), st.GetCurrentLimit()) ||
			(js.GetDurationUntilReset() == nil) != (st.GetDurationUntilReset() == nil) ||
			js.GetDurationUntilReset().AsDuration().Round(time.Second) != st.GetDurationUntilReset().AsDuration().Round(time.Second) {
			t.Errorf("status %d: /json says %v, gRPC %v", i, js, st)
		}
	}
	for _, hv := range want.GetResponseHeadersToAdd() {
		if got := h.Get(hv.GetKey()); got != hv.GetValue() {
			t.Errorf("/json header %s: %q, gRPC's %q", hv.GetKey(), got, hv.GetValue())
		}
	}
}

// A limit without a name field has an empty current_limit.name, as
// envoyproxy/ratelimit sends it (scripts/compat.sh compares it), while
// the RateLimit fields and the metrics, which need a name, use its
// descriptor path. This pins what the package doc says.
func TestUnnamedLimitName(t *testing.T) {
	svc := start(t, setup{yaml: bankConfig, store: memstore.New(memstore.Options{})})
	r := req("bank", desc("route=statement", "account=acct-42"))
	resp := svc.call(t, r)
	expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{29})
	if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetName() != "" || cl.GetRequestsPerUnit() != 30 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit %v, want 30 per MINUTE without a name", cl)
	}
	if p := header(resp, "RateLimit-Policy"); p != `"`+statementPath+`";q=30;w=60` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	if f := svc.figures(t, statementPath); f != (figures{total: 1, within: 1}) {
		t.Errorf("metrics under %s: %+v, want 1 hit within", statementPath, f)
	}
}

// A shadow_mode limit in a request that another descriptor denies is
// evaluated, as the request's normal descriptors are: its figures as now
// (nothing was recorded) in its status, /json and its metrics, over its
// limit too. It was OK with limit_remaining 0 and no
// duration_until_reset, and counted in total_hits alone.
func TestShadowInADeniedRequest(t *testing.T) {
	svc := start(t, setup{yaml: bankConfig, store: memstore.New(memstore.Options{})})
	svc.call(t, req("bank", desc("pix=acct-42"))) // pix's one a minute
	r := req("bank", desc("pix=acct-42"), desc("boleto=acct-10"), desc("route=statement", "account=acct-42"))
	check := func(step string, boletoLeft uint32, want figures) {
		t.Helper()
		resp := svc.call(t, r)
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over, ok, ok}, []uint32{0, boletoLeft, 30})
		st := resp.GetStatuses()[1]
		if cl := st.GetCurrentLimit(); cl.GetName() != "boleto" || cl.GetRequestsPerUnit() != 2 {
			t.Errorf("%s: boleto's current_limit %v", step, cl)
		}
		if d := st.GetDurationUntilReset(); d == nil || d.AsDuration() <= 0 || d.AsDuration() > time.Minute {
			t.Errorf("%s: boleto's duration_until_reset %v, want within its minute", step, d)
		}
		if f := svc.figures(t, "boleto"); f != want {
			t.Errorf("%s: boleto's metrics %+v, want %+v", step, f, want)
		}
		if f := svc.figures(t, statementPath); f.within != f.total || f.over != 0 {
			t.Errorf("%s: statement's metrics %+v, want every hit within", step, f)
		}
		svc.viaJSON(t, r, resp)
	}
	// Fresh: 2 left, within (the /json call of each step counts too).
	check("fresh", 2, figures{total: 1, within: 1})
	for range 3 { // 2 within (the second near), 1 over the shadow limit, let through
		expect(t, svc.call(t, req("bank", desc("boleto=acct-10"))), ok, []rlsv3.RateLimitResponse_Code{ok}, nil)
	}
	check("over its shadow limit", 0, figures{total: 6, within: 4, over: 2, near: 1, shadow: 2})
}
