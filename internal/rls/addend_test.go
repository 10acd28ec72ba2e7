package rls_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/memstore"
)

// TestHitsAddendBeyondCapacity: a hits_addend that no limit could ever
// admit is OVER_LIMIT, as envoyproxy/ratelimit answers it, with nothing
// recorded on any descriptor. An error would be a bypass: Envoy's
// rate-limit filter lets a request through on an error by default
// (failure_mode_deny: false), and a hits_addend can come from a request
// header (a HitsAddend format of %REQ(...)%).
func TestHitsAddendBeyondCapacity(t *testing.T) {
	svc := start(t, setup{yaml: invalidConfig, store: memstore.New(memstore.Options{})})
	addend := func(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"beyond the capacity", req("inv", addend(desc("user=a"), 11), desc("user=other"))},
		{"beyond a sliding log's most at once", req("inv", addend(desc("log=a"), 101), desc("user=other"))},
		{"beyond int64", req("inv", addend(desc("user=a"), 1<<63), desc("user=other"))},
		{"the largest", req("inv", addend(desc("user=a"), 1<<64-1), desc("user=other"))},
		{"the request's beyond the capacity", &rlsv3.RateLimitRequest{Domain: "inv", HitsAddend: 4_000_000_000,
			Descriptors: []*commonv3.RateLimitDescriptor{desc("user=a"), addend(desc("user=other"), 1)}}},
		{"identical descriptors beyond it together", req("inv", addend(desc("user=a"), 6), addend(desc("user=a"), 6), desc("user=other"))},
		{"identical descriptors beyond int64 together", req("inv", addend(desc("user=a"), 1<<63-1), addend(desc("user=a"), 1<<63-1), desc("user=other"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := svc.client.ShouldRateLimit(context.Background(), c.req)
			if err != nil {
				t.Fatalf("%v; want OVER_LIMIT", err)
			}
			if resp.GetOverallCode() != over {
				t.Errorf("overall %v, want OVER_LIMIT", resp.GetOverallCode())
			}
			sts := resp.GetStatuses()
			if st := sts[0]; st.GetCode() != over || st.GetCurrentLimit().GetRequestsPerUnit() == 0 {
				t.Errorf("the oversized descriptor: %v, want OVER_LIMIT with its limit", st)
			}
			if st := sts[len(sts)-1]; st.GetCode() != ok || st.GetLimitRemaining() != 10 {
				t.Errorf("the other descriptor: %v, want OK with its 10 left (nothing recorded)", st)
			}
			if header(resp, "Retry-After") == "" {
				t.Error("no Retry-After")
			}
		})
	}
	// Over /json: 429, as any OVER_LIMIT.
	if code, _, resp, raw := svc.post(t, `{"domain":"inv","descriptors":[{"entries":[{"key":"user","value":"a"}],"hitsAddend":"11"}]}`); code != 429 || resp.GetOverallCode() != over {
		t.Errorf("/json: status %d %s, want 429 OVER_LIMIT", code, raw)
	}
	// Nothing was recorded: user=a, log=a and user=other have their quota.
	expect(t, svc.call(t, req("inv", desc("user=a"), desc("log=a"), desc("user=other"))), ok,
		[]rlsv3.RateLimitResponse_Code{ok, ok, ok}, []uint32{9, 4999, 9})
}
