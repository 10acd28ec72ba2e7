package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestServeHeadersAsUpstream: the service adds no header unless asked, as
// envoyproxy/ratelimit; LIMIT_RESPONSE_HEADERS_ENABLED adds upstream's
// three, under LIMIT_*_HEADER's names or upstream's defaults; floodgate's
// draft-11 fields come with DRAFT_RATELIMIT_HEADERS alone.
func TestServeHeadersAsUpstream(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h.yaml"), []byte("domain: h\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // the header names, in order
	}{
		{"default", map[string]string{}, nil},
		{"upstream's names", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{"names of its own", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-L", "LIMIT_REMAINING_HEADER": "X-R", "LIMIT_RESET_HEADER": "X-T"}, []string{"X-L", "X-R", "X-T"}},
		{"names without the switch", map[string]string{"LIMIT_LIMIT_HEADER": "X-L"}, nil},
		{"draft-11", map[string]string{"DRAFT_RATELIMIT_HEADERS": "true"}, []string{"RateLimit-Policy", "RateLimit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.env["CONFIG_DIR"] = dir
			client := startServe(t, c.env).client(t)
			resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "h", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range resp.GetResponseHeadersToAdd() {
				got = append(got, h.GetKey())
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("headers %q, want %q", got, c.want)
			}
			if len(c.want) == 3 {
				if v := resp.GetResponseHeadersToAdd()[1].GetValue(); v != "4" {
					t.Errorf("%s: %q, want 4", c.want[1], v)
				}
			}
		})
	}
	_, err := parseServe(nil, env(map[string]string{"CONFIG_DIR": dir, "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "Rate Reset"}))
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `LIMIT_RESET_HEADER: "Rate Reset" is not a header name`) {
		t.Errorf("an invalid header name: %v, want it refused", err)
	}
}
