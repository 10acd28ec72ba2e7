package rlconfig_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// Rules gives a library limit the rule of the descriptor (name, key): the
// file's limit and window, under the limit's own name, and the limit's own
// algorithm unless the file names one; nothing for unlimited, blocked or
// unmatched keys.
func TestRules(t *testing.T) {
	cfg, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte(`
domain: app
descriptors:
  - key: pix
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: pix
    value: vip
    rate_limit: {unit: hour, requests_per_unit: 500}
  - key: pix
    value: free
    rate_limit: {unlimited: true}
  - key: pix
    value: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: api
    algorithm: token_bucket
    burst: 7
    rate_limit: {unit: second, requests_per_unit: 5}
`)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := rlconfig.NewRules("app", func() *rlconfig.Config { return cfg })
	pix := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute}
	bucket := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute, Algorithm: floodgate.TokenBucket}
	bucket.Burst = 3
	api := floodgate.Rule{Name: "api", Limit: 1, Window: time.Minute}
	cases := []struct {
		base floodgate.Rule
		key  string
		want floodgate.Rule
		ok   bool
	}{
		{pix, "acct-1", floodgate.Rule{Name: "pix", Limit: 20, Window: time.Minute}, true},
		{pix, "vip", floodgate.Rule{Name: "pix", Limit: 500, Window: time.Hour}, true},
		{bucket, "acct-1", floodgate.Rule{Name: "pix", Limit: 20, Window: time.Minute, Algorithm: floodgate.TokenBucket, Burst: 3}, true},
		{api, "k", floodgate.Rule{Name: "api", Limit: 5, Window: time.Second, Algorithm: floodgate.TokenBucket, Burst: 7}, true},
		{pix, "free", floodgate.Rule{}, false},
		{pix, "banned", floodgate.Rule{}, false},
		{floodgate.Rule{Name: "other"}, "k", floodgate.Rule{}, false},
	}
	for _, tc := range cases {
		got, ok := rules.Override(tc.base, tc.key)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Rule(%v, %q) = %+v, %v; want %+v, %v", tc.base, tc.key, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := rlconfig.NewRules("nowhere", func() *rlconfig.Config { return cfg }).Override(pix, "acct-1"); ok {
		t.Errorf("an unknown domain gave %v", got)
	}
}
