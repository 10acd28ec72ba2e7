package rlqs

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlqsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestFilterConfigValidates reads the rate_limit_quota filter of
// docs/SERVICE.md (the yaml block after the rlqs-filter comment), parses
// its typed_config into the filter's proto and calls go-control-plane's
// generated ValidateAll, on the filter and on each bucket's settings
// (which an Any hides from the filter's validation).
func TestFilterConfigValidates(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SERVICE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- rlqs-filter")
	if !ok {
		t.Fatal("docs/SERVICE.md has no rlqs-filter comment")
	}
	_, after, ok = strings.Cut(after, "```yaml\n")
	block, _, ok2 := strings.Cut(after, "```\n")
	if !ok || !ok2 {
		t.Fatal("no yaml block after the rlqs-filter comment")
	}
	var filter struct {
		Name        string         `yaml:"name"`
		TypedConfig map[string]any `yaml:"typed_config"`
	}
	if err := yaml.Unmarshal([]byte(block), &filter); err != nil {
		t.Fatal(err)
	}
	if filter.Name != "envoy.filters.http.rate_limit_quota" {
		t.Errorf("filter name %q", filter.Name)
	}
	raw, err := json.Marshal(filter.TypedConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The block's typed_config is an Any: its @type names the filter.
	var cfg rlqsfilter.RateLimitQuotaFilterConfig
	var typed map[string]any
	_ = json.Unmarshal(raw, &typed)
	if typed["@type"] != "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig" {
		t.Fatalf("@type %v", typed["@type"])
	}
	delete(typed, "@type")
	raw, _ = json.Marshal(typed)
	if err := protojson.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("the filter does not parse as RateLimitQuotaFilterConfig: %v", err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Errorf("the filter fails its validation: %v", err)
	}
	if cfg.GetDomain() != "edge" || cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName() != "floodgate" {
		t.Errorf("domain %q, cluster %q", cfg.GetDomain(), cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName())
	}
	ms := cfg.GetBucketMatchers().GetMatcherList().GetMatchers()
	if len(ms) == 0 {
		t.Fatal("no bucket matcher")
	}
	for i, m := range ms {
		var bs rlqsfilter.RateLimitQuotaBucketSettings
		if err := m.GetOnMatch().GetAction().GetTypedConfig().UnmarshalTo(&bs); err != nil {
			t.Fatalf("matcher %d: %v", i, err)
		}
		if err := bs.ValidateAll(); err != nil {
			t.Errorf("matcher %d: the bucket settings fail their validation: %v", i, err)
		}
		// The invariant's assumption: both fallbacks deny.
		if bs.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String() != "DENY_ALL" ||
			bs.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String() != "DENY_ALL" {
			t.Errorf("matcher %d: the fallbacks must deny: %v", i, &bs)
		}
		if got := bs.GetBucketIdBuilder().GetBucketIdBuilder(); got["route"].GetStringValue() != "api" || got["tenant"].GetCustomValue() == nil {
			t.Errorf("matcher %d: bucket id builder %v", i, got)
		}
	}
}
