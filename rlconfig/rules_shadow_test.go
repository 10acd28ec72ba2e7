package rlconfig_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// A descriptor in shadow_mode must never deny, which a rule cannot say:
// Rules gives none for it, and the limit's own rule applies, rather than
// enforcing a limit that the file only trials.
func TestRulesSkipShadowMode(t *testing.T) {
	cfg, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte(`
domain: app
descriptors:
  - key: pix
    value: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := rlconfig.NewRules("app", func() *rlconfig.Config { return cfg })
	pix := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute}
	if got, ok := rules.Override(pix, "trial"); ok {
		t.Fatalf("Rule of a shadow_mode descriptor = %v, true; want none (a shadow limit must not deny)", got)
	}
}
