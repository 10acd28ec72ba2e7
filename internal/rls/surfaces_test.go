package rls_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/promtest"
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
  - key: banned
    rate_limit: {name: banned, unit: minute, requests_per_unit: 0}
  - key: login
    failure_mode: local
    rate_limit: {name: login, unit: minute, requests_per_unit: 5}
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
	// The /json call comes after the gRPC one: a time left may have
	// crossed a second meanwhile, no more.
	for i, st := range want.GetStatuses() {
		js := got.GetStatuses()[i]
		jd, gd := js.GetDurationUntilReset().AsDuration(), st.GetDurationUntilReset().AsDuration()
		if js.GetCode() != st.GetCode() || js.GetLimitRemaining() != st.GetLimitRemaining() || !proto.Equal(js.GetCurrentLimit(), st.GetCurrentLimit()) ||
			(js.GetDurationUntilReset() == nil) != (st.GetDurationUntilReset() == nil) || jd > gd || gd-jd > time.Second {
			t.Errorf("status %d: /json says %v, gRPC %v", i, js, st)
		}
	}
	for _, hv := range want.GetResponseHeadersToAdd() {
		if got := h.Get(hv.GetKey()); !sameButSeconds(got, hv.GetValue()) {
			t.Errorf("/json header %s: %q, gRPC's %q", hv.GetKey(), got, hv.GetValue())
		}
	}
}

// seconds matches a field's whole seconds: Retry-After's value, a
// RateLimit member's t.
var seconds = regexp.MustCompile(`(^|t=)[0-9]+`)

// sameButSeconds reports whether the field values later and earlier are
// the same but for whole seconds (Retry-After, t=) each at most one less
// in later, the value sent a moment after.
func sameButSeconds(later, earlier string) bool {
	mask := func(v string) string { return seconds.ReplaceAllString(v, "${1}#") }
	if mask(later) != mask(earlier) {
		return false
	}
	l, e := seconds.FindAllString(later, -1), seconds.FindAllString(earlier, -1)
	for i := range l {
		a, _ := strconv.Atoi(strings.TrimPrefix(l[i], "t="))
		b, _ := strconv.Atoi(strings.TrimPrefix(e[i], "t="))
		if a > b || b-a > 1 {
			return false
		}
	}
	return true
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

// A shadow_mode limit in a request that another descriptor denies is not
// evaluated (a store call whose verdict changes nothing): its status has
// no figures on any surface (it had a current_limit with limit_remaining
// 0, an exhausted quota that nobody measured) and its hit counts in
// total_hits alone, while the request's enforced descriptors report
// theirs.
func TestShadowInADeniedRequest(t *testing.T) {
	svc := start(t, setup{yaml: bankConfig, store: memstore.New(memstore.Options{})})
	svc.call(t, req("bank", desc("pix=acct-42"))) // pix's one a minute
	r := req("bank", desc("pix=acct-42"), desc("boleto=acct-10"), desc("route=statement", "account=acct-42"))
	check := func(step string, want figures) {
		t.Helper()
		resp := svc.call(t, r)
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over, ok, ok}, []uint32{0, 0, 30})
		st := resp.GetStatuses()[1]
		if cl, d := st.GetCurrentLimit(), st.GetDurationUntilReset(); cl != nil || d != nil {
			t.Errorf("%s: boleto's current_limit %v, duration_until_reset %v; want none, as it was not evaluated", step, cl, d)
		}
		if f := svc.figures(t, "boleto"); f != want {
			t.Errorf("%s: boleto's metrics %+v, want %+v", step, f, want)
		}
		if f := svc.figures(t, statementPath); f.within != f.total || f.over != 0 {
			t.Errorf("%s: statement's metrics %+v, want every hit within", step, f)
		}
		svc.viaJSON(t, r, resp)
	}
	check("fresh", figures{total: 1})
	for range 3 { // 2 within (the second near), 1 over the shadow limit, let through
		expect(t, svc.call(t, req("bank", desc("boleto=acct-10"))), ok, []rlsv3.RateLimitResponse_Code{ok}, nil)
	}
	// The /json call of the first step counts 1 in total_hits too.
	check("over its shadow limit", figures{total: 6, within: 2, over: 1, near: 1, shadow: 1})
}

// A request denied without a store verdict (a blocked limit:
// requests_per_unit 0) is peeked for its enforced descriptors' figures,
// and its shadow_mode descriptor is not evaluated either, as in a request
// that the store denied: no figures on any surface, and its hit in
// total_hits alone. The peek evaluated it, a store call per shadow hit
// on the path a flood takes.
func TestShadowInABlockedRequest(t *testing.T) {
	svc := start(t, setup{yaml: bankConfig, store: memstore.New(memstore.Options{})})
	r := req("bank", desc("banned=acct-42"), desc("boleto=acct-10"), desc("route=statement", "account=acct-42"))
	resp := svc.call(t, r)
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over, ok, ok}, []uint32{0, 0, 30})
	st := resp.GetStatuses()[1]
	if cl, d := st.GetCurrentLimit(), st.GetDurationUntilReset(); cl != nil || d != nil {
		t.Errorf("boleto's current_limit %v, duration_until_reset %v; want none, as it was not evaluated", cl, d)
	}
	if f := svc.figures(t, "boleto"); f != (figures{total: 1}) {
		t.Errorf("boleto's metrics %+v, want its hit in total_hits alone", f)
	}
	if f := svc.figures(t, statementPath); f != (figures{total: 1, within: 1}) {
		t.Errorf("statement's metrics %+v, want its hit within", f)
	}
	svc.viaJSON(t, r, resp)
}

// With the store down, an answer that a failure mode decided says so on
// every surface, with no figure that nobody measured: fail-closed is
// over with nothing left until its Retry-After (duration_until_reset
// says the same 5s), fail-open has no current_limit (Envoy leaves it out
// of its x-ratelimit headers instead of reading an exhausted quota) and
// no RateLimit members, and error answers Unavailable. Every hit counts
// in total_hits and in neither within_limit nor over_limit, and every
// request in one floodgate_decisions_total outcome, a shadow-only one
// too. Before: duration_until_reset 0s beside Retry-After 5; OK with
// limit_remaining 0 and a current_limit; error-mode hits not in
// total_hits; shadow-only requests in no outcome.
func TestFailureModeAnswers(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: bankConfig, store: fs})
	fs.Set(faultstore.Fail)
	for _, c := range []struct {
		name  string
		r     *rlsv3.RateLimitRequest
		code  rlsv3.RateLimitResponse_Code
		limit *rlsv3.RateLimitResponse_RateLimit // current_limit; nil: none
		reset time.Duration                      // duration_until_reset; 0: none
		retry string
	}{
		{"closed", req("bank", desc("pix=acct-42")), over,
			&rlsv3.RateLimitResponse_RateLimit{Name: "pix", RequestsPerUnit: 1, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}, 5 * time.Second, "5"},
		{"open", req("bank", desc("route=statement", "account=acct-42")), ok, nil, 0, ""},
		{"shadow", req("bank", desc("boleto=acct-10")), ok, nil, 0, ""},
	} {
		resp := svc.call(t, c.r)
		expect(t, resp, c.code, []rlsv3.RateLimitResponse_Code{c.code}, []uint32{0})
		st := resp.GetStatuses()[0]
		if !proto.Equal(st.GetCurrentLimit(), c.limit) {
			t.Errorf("%s: current_limit %v, want %v", c.name, st.GetCurrentLimit(), c.limit)
		}
		if d := st.GetDurationUntilReset(); (d == nil) != (c.reset == 0) || d.AsDuration() != c.reset {
			t.Errorf("%s: duration_until_reset %v, want %v", c.name, d, c.reset)
		}
		if h := header(resp, "Retry-After"); h != c.retry {
			t.Errorf("%s: Retry-After %q, want %q", c.name, h, c.retry)
		}
		if p, q := header(resp, "RateLimit-Policy"), header(resp, "RateLimit"); p != "" || q != "" {
			t.Errorf("%s: RateLimit-Policy %q and RateLimit %q, from no figures", c.name, p, q)
		}
		svc.viaJSON(t, c.r, resp)
	}
	r := req("bank", desc("user=u"))
	if _, err := svc.client.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.Unavailable {
		t.Fatalf("failure_mode error: %v, want Unavailable", err)
	}
	if code, _, _, raw := svc.post(t, `{"domain":"bank","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`); code != http.StatusServiceUnavailable {
		t.Fatalf("/json, failure_mode error: %d %s, want 503", code, raw)
	}
	for _, limit := range []string{"pix", statementPath, "boleto", "user"} {
		if f := svc.figures(t, limit); f != (figures{total: 2}) {
			t.Errorf("metrics of %s: %+v, want its 2 hits in total_hits alone", limit, f)
		}
	}
	outcomes := map[string]float64{"failed_closed": 2, "failed_open": 4, "error": 2}
	for outcome, want := range outcomes {
		if got := counter(t, svc.reg, "floodgate_decisions_total", map[string]string{"gate": "bank", "policy": "", "outcome": outcome}); got != want {
			t.Errorf("decisions %s = %v, want %v", outcome, got, want)
		}
	}
	if got := promtest.Sum(t, svc.reg, "floodgate_decisions_total", nil); got != 8 {
		t.Errorf("decisions = %v in all, want 8: one per request", got)
	}
	if got := promtest.Sum(t, svc.reg, "floodgate_rls_requests_total", nil); got != 8 {
		t.Errorf("requests = %v, want 8", got)
	}
}

// A hit that failure_mode local decided was evaluated, by the local
// limits: unlike the other failure modes' hits, it counts in
// within_limit as a store's would, and its status has the local figures
// (the package doc's Metrics; docs/SERVICE.md says the same).
func TestLocalFailureModeCounts(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: bankConfig, store: fs})
	fs.Set(faultstore.Fail)
	for i := range 2 {
		resp := svc.call(t, req("bank", desc("login=u")))
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{uint32(4 - i)})
		if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetName() != "login" || cl.GetRequestsPerUnit() != 5 {
			t.Errorf("call %d: current_limit %v, want login's 5", i+1, cl)
		}
	}
	if f := svc.figures(t, "login"); f != (figures{total: 2, within: 2}) {
		t.Errorf("login's metrics %+v, want 2 hits within", f)
	}
	if got := promtest.Sum(t, svc.reg, "floodgate_decisions_total", map[string]string{"gate": "bank", "outcome": "local"}); got != 2 {
		t.Errorf("decisions local = %v, want 2", got)
	}
}

// sameButSeconds tells a second crossed from any other difference, so
// that viaJSON still compares the fields.
func TestSameButSeconds(t *testing.T) {
	for _, c := range []struct {
		later, earlier string
		want           bool
	}{
		{`"pix";r=0;t=7, "s";r=30;t=7`, `"pix";r=0;t=8, "s";r=30;t=8`, true},
		{`"pix";r=0;t=8`, `"pix";r=0;t=8`, true},
		{"7", "8", true},
		{`"pix";r=0;t=6`, `"pix";r=0;t=8`, false}, // two seconds
		{`"pix";r=0;t=9`, `"pix";r=0;t=8`, false}, // later, and longer
		{`"pix";r=1;t=8`, `"pix";r=0;t=8`, false}, // another remaining
		{`"pix";q=10;w=60`, `"pix";q=10;w=61`, false},
		{"6", "8", false},
	} {
		if got := sameButSeconds(c.later, c.earlier); got != c.want {
			t.Errorf("sameButSeconds(%q, %q) = %v, want %v", c.later, c.earlier, got, c.want)
		}
	}
}
