package rls_test

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate/memstore"
)

// quotaConfig has a limit in quota_mode (q, 2 a minute), one in
// shadow_mode and quota_mode (sq: shadow mode wins) and one of neither
// (n, 5 a minute).
const quotaConfig = `domain: qm
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: sq
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: n
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestQuotaMode: a limit in quota mode never denies. Past it, its status
// says OK with its current_limit and limit_remaining 0 and no
// duration_until_reset, its hits count over the limit (not in
// shadow_mode), and the dynamic metadata lists it, as
// envoyproxy/ratelimit answers quota_mode; the request's other limits are
// decided as usual.
func TestQuotaMode(t *testing.T) {
	svc := start(t, setup{yaml: quotaConfig, store: memstore.New(memstore.Options{}), metadata: true})
	r := req("qm", desc("q=a"), desc("sq=a"), desc("n=a"))
	for i, want := range []struct {
		remaining  []uint32
		violations []float64
	}{
		{[]uint32{1, 0, 4}, nil},
		{[]uint32{0, 0, 3}, nil},
		{[]uint32{0, 0, 2}, []float64{0}}, // q past its quota, sq past its shadow limit
	} {
		resp := svc.call(t, r)
		expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok, ok, ok}, want.remaining)
		q := resp.GetStatuses()[0]
		if q.GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Errorf("call %d: q's current_limit %v, want 2 a minute", i+1, q.GetCurrentLimit())
		}
		if over, d := want.violations != nil, q.GetDurationUntilReset(); over != (d == nil) {
			t.Errorf("call %d: q's duration_until_reset %v; want none past the quota alone", i+1, d)
		}
		md := resp.GetDynamicMetadata().AsMap()
		var got []float64
		if vs, ok := md["quotaModeViolations"].([]any); ok {
			for _, v := range vs {
				got = append(got, v.(float64))
			}
		}
		if len(got) != len(want.violations) || len(got) == 1 && got[0] != want.violations[0] {
			t.Errorf("call %d: quotaModeViolations %v, want %v", i+1, got, want.violations)
		}
		if md["quotaModeEnabled"] != true || md["domain"] != "qm" {
			t.Errorf("call %d: metadata %v, want quotaModeEnabled true and domain qm", i+1, md)
		}
	}
	for _, c := range []struct {
		limit, counter string
		want           float64
	}{
		{"qm.q", "over_limit", 1}, {"qm.q", "shadow_mode", 0}, {"qm.q", "within_limit", 2},
		{"qm.sq", "over_limit", 2}, {"qm.sq", "shadow_mode", 2},
		{"qm.n", "within_limit", 3}, {"qm.n", "over_limit", 0},
	} {
		if got := counter(t, svc.reg, "floodgate_rls_"+c.counter+"_total", map[string]string{"domain": "qm", "limit": c.limit, "descriptor": ""}); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.limit, c.counter, got, c.want)
		}
	}
}

// TestGlobalQuotaMode: Options.QuotaMode puts every limit in quota mode,
// but those in shadow mode: n past its limit answers OK too.
func TestGlobalQuotaMode(t *testing.T) {
	svc := start(t, setup{yaml: quotaConfig, store: memstore.New(memstore.Options{}), quota: true, metadata: true})
	var resp *rlsv3.RateLimitResponse
	for range 6 {
		resp = svc.call(t, req("qm", desc("n=b")))
	}
	expect(t, resp, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	vs, _ := resp.GetDynamicMetadata().AsMap()["quotaModeViolations"].([]any)
	if len(vs) != 1 || vs[0] != 0.0 {
		t.Errorf("quotaModeViolations %v, want [0]", vs)
	}
	// Without quota mode, the sixth is over, and the metadata says so.
	plain := start(t, setup{yaml: quotaConfig, store: memstore.New(memstore.Options{}), metadata: true})
	for range 6 {
		resp = plain.call(t, req("qm", desc("n=b")))
	}
	expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	if md := resp.GetDynamicMetadata().AsMap(); md["quotaModeViolations"] != nil || md["quotaModeEnabled"] != false {
		t.Errorf("metadata %v, want no violations and quotaModeEnabled false", md)
	}
}

// TestDynamicMetadata: the metadata describes the request as
// envoyproxy/ratelimit's does, and is there only when asked for.
func TestDynamicMetadata(t *testing.T) {
	svc := start(t, setup{yaml: quotaConfig, store: memstore.New(memstore.Options{}), metadata: true})
	r := req("qm", desc("n=c", "x=y"))
	r.HitsAddend = 2
	got := svc.call(t, r).GetDynamicMetadata()
	want, err := structpb.NewStruct(map[string]any{
		"domain":           "qm",
		"descriptors":      []any{map[string]any{"entries": []any{"n=c", "x=y"}}},
		"hitsAddend":       2.0,
		"quotaModeEnabled": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("dynamic_metadata %v, want %v", got, want)
	}
	none := start(t, setup{yaml: quotaConfig, store: memstore.New(memstore.Options{})})
	if md := none.call(t, r).GetDynamicMetadata(); md != nil {
		t.Errorf("dynamic_metadata %v without Options.DynamicMetadata", md)
	}
}
