package rls_test

import (
	"fmt"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-rl/floodgate/memstore"
)

const boundsConfig = `
domain: b
descriptors:
  - key: login
    rate_limit: {name: login_per_address, unit: minute, requests_per_unit: 100}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// series returns the label values of name's series for label.
func series(t *testing.T, svc *service, name, label string) map[string]bool {
	t.Helper()
	mfs, err := svc.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelOf(m, label)] = true
		}
	}
	return out
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Request-borne limits never push a configured limit's label out of the
// decisions metric: every per-request override of a domain is reported
// under one name (unbounded, 1,100 requests, each a new entry key with a
// limit, made 8,016 series and counted login_per_address under
// "(other)").
func TestRequestBorneLimitsMakeNoSeries(t *testing.T) {
	svc := start(t, setup{yaml: boundsConfig, store: memstore.New(memstore.Options{})})
	for i := range 1100 {
		d := desc(fmt.Sprintf("k%d=v", i))
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		svc.call(t, req("b", d))
	}
	expect(t, svc.call(t, req("b", desc("login=192.0.2.1"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{99})
	policies := series(t, svc, "floodgate_decisions_total", "policy")
	if !policies["login_per_address"] || policies["(other)"] || len(policies) > 3 {
		t.Errorf("decision policies %v, want login_per_address and b.override, no (other)", policies)
	}
	if got := counter(t, svc.reg, "floodgate_decisions_total", map[string]string{"gate": "b", "policy": "b.override", "outcome": "allowed"}); got != 1100 {
		t.Errorf("overrides allowed = %v, want 1100", got)
	}
}

// detailed_metric's descriptor label is bounded like the policies:
// past 1,000 distinct values, new ones are counted under "(other)"
// (unbounded, 20 requests of 250 values made 10,000 series).
func TestDetailedMetricSeriesAreBounded(t *testing.T) {
	svc := start(t, setup{yaml: boundsConfig, store: memstore.New(memstore.Options{})})
	n := 0
	for range 5 {
		var ds []*commonv3.RateLimitDescriptor
		for range 220 {
			ds = append(ds, desc(fmt.Sprintf("detailed=v%d", n)))
			n++
		}
		svc.call(t, req("b", ds...))
	}
	labels := series(t, svc, "floodgate_rls_total_hits_total", "descriptor")
	if len(labels) != 1001 || !labels["(other)"] || !labels["b.detailed_v0"] {
		t.Errorf("%d descriptor labels (detailed_v0 %v, (other) %v), want 1,000 and (other)", len(labels), labels["detailed_v0"], labels["(other)"])
	}
	if got := counter(t, svc.reg, "floodgate_rls_total_hits_total", map[string]string{"domain": "b", "limit": "b.detailed", "descriptor": "(other)"}); got != 100 {
		t.Errorf("hits under (other) = %v, want 100", got)
	}
}
