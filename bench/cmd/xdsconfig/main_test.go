package main

import (
	"slices"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

func TestConvert(t *testing.T) {
	res, dropped, err := Convert("f", []byte(`
domain: d
descriptors:
  - key: k
    value: v*
    share_threshold: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5, name: n, replaces: [{name: m}]}
    descriptors:
      - key: sub
        rate_limit: {unit: day, requests_per_unit: 0}
  - key: u
    rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"descriptors[0].share_threshold: true (no field in ratelimit.config.ratelimit.v3.RateLimitDescriptor)"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
	d := res.GetDescriptors()
	if res.GetName() != "f" || res.GetDomain() != "d" || len(d) != 2 {
		t.Fatalf("resource %v", res)
	}
	l := d[0].GetRateLimit()
	if d[0].GetValue() != "v*" || !d[0].GetShadowMode() || l.GetUnit() != rlsconf.RateLimitUnit_MINUTE || l.GetRequestsPerUnit() != 5 ||
		l.GetName() != "n" || len(l.GetReplaces()) != 1 || l.GetReplaces()[0].GetName() != "m" {
		t.Errorf("descriptor 0 %v", d[0])
	}
	if s := d[0].GetDescriptors()[0].GetRateLimit(); s.GetUnit() != rlsconf.RateLimitUnit_DAY || s.GetRequestsPerUnit() != 0 {
		t.Errorf("nested %v", s)
	}
	if !d[1].GetRateLimit().GetUnlimited() {
		t.Errorf("descriptor 1 %v", d[1])
	}
	if _, _, err := Convert("f", []byte("domain: d\ndescriptors: {key: k}\n")); err == nil || !strings.Contains(err.Error(), "want a list") {
		t.Errorf("a mapping for a list: err %v", err)
	}
}

func TestLoadDirCompat(t *testing.T) {
	res, dropped, err := LoadDir("../../compat/ratelimit/config")
	if err != nil {
		t.Fatal(err)
	}
	if len(res) < 12 {
		t.Errorf("%d resources", len(res))
	}
	for _, d := range dropped {
		if !strings.HasPrefix(d, "readme11_example11.yaml: ") || !strings.Contains(d, "share_threshold") {
			t.Errorf("dropped %q: only example 11's share_threshold should be", d)
		}
	}
}
