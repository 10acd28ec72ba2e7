package rlmatch

import (
	"slices"
	"testing"
)

// Keys lists each first-level descriptor key of a domain once, whether
// the descriptor has no value, a plain one or a wildcard, and none of the
// deeper levels' keys nor another domain's.
func TestKeys(t *testing.T) {
	cfg, err := Parse(map[string][]byte{
		"bank.yaml": []byte(`domain: bank
descriptors:
  - key: pix
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: pix
    value: acct-42
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: login
    value: "10.*"
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: route
    value: statement
    descriptors:
      - key: account
        rate_limit: {unit: minute, requests_per_unit: 30}
`),
		"other.yaml": []byte(`domain: other
descriptors:
  - key: elsewhere
    rate_limit: {unit: second, requests_per_unit: 1}
`),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		want   []string
	}{
		{"bank", []string{"login", "pix", "route"}},
		{"other", []string{"elsewhere"}},
		{"none", nil},
	} {
		if got := cfg.Keys(tc.domain); !slices.Equal(got, tc.want) {
			t.Errorf("Keys(%q) = %q, want %q", tc.domain, got, tc.want)
		}
	}
	if got := (*Config)(nil).Keys("bank"); got != nil {
		t.Errorf("a nil Config's Keys = %q, want none", got)
	}
}
