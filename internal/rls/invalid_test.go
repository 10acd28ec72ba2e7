package rls_test

import (
	"context"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

const invalidConfig = `
domain: inv
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: log
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 5000}
`

// TestInvalidRequests: what the service cannot decide is refused with
// InvalidArgument, a message that says why, and nothing counted.
func TestInvalidRequests(t *testing.T) {
	svc := start(t, setup{yaml: invalidConfig, store: memstore.New(memstore.Options{})})
	many := make([]*commonv3.RateLimitDescriptor, rls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("user=a")
	}
	deep := desc()
	for range rls.MaxEntries + 1 {
		deep.Entries = append(deep.Entries, desc("k=v").Entries...)
	}
	override := desc("user=a")
	override.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5} // unit UNKNOWN
	negative := desc("user=a")
	negative.IsNegativeHits = true
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", req("", desc("user=a")), "domain is empty"},
		{"no descriptors", req("inv"), "no descriptors"},
		{"empty entries", req("inv", desc("user=a"), &commonv3.RateLimitDescriptor{}), "descriptor 1 has no entries"},
		{"empty key", req("inv", desc("=a")), "entry 0: key is empty"},
		{"too many descriptors", req("inv", many...), "257 descriptors, at most 256"},
		{"too many entries", req("inv", deep), "65 entries, at most 64"},
		{"limit override without a unit", req("inv", override), "limit override: unit UNKNOWN"},
		{"negative hits", req("inv", negative), "is_negative_hits is not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.client.ShouldRateLimit(context.Background(), c.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Errorf("got %v, want InvalidArgument with %q", err, c.want)
			}
		})
	}
	// Nothing was counted: user=a and user=b have their 10.
	expect(t, svc.call(t, req("inv", desc("user=a"), desc("user=b"))), ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{9, 9})
	if got := counter(t, svc.reg, "floodgate_rls_requests_total", map[string]string{"code": "invalid_argument"}); got != 8 {
		t.Errorf("requests_total{code=invalid_argument} = %v, want 8", got)
	}

	t.Run("a message over the size bound", func(t *testing.T) {
		huge := req("inv", desc("user="+strings.Repeat("x", rls.MaxMessageSize)))
		_, err := svc.client.ShouldRateLimit(context.Background(), huge)
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("got %v, want ResourceExhausted", err)
		}
		// The service still answers.
		svc.call(t, req("inv", desc("user=c")))
	})
}
