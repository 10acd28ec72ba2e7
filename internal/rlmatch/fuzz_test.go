package rlmatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, every
// error must wrap ErrInvalidConfig, and every accepted limit must carry a
// valid rule.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../../rlconfig/testdata/envoy/*.y*ml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\nalgorithm: token_bucket\nburst: 9\ndescriptors:\n  - key: k\n    rate_limits: [{window: 90s, requests_per_unit: 3}, {unit: day, requests_per_unit: 0}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: '*a*'\n    share_threshold: true\n    descriptors: [{key: j, rate_limit: {unlimited: true}}]\n"))
	f.Add([]byte("domain: d\n---\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(map[string][]byte{"f.yaml": data}, Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		for _, l := range cfg.Limits() {
			if l.Unlimited {
				continue
			}
			r := l.Rule
			if l.Blocked() {
				r.Limit = 1
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted limit %v has an invalid rule: %v", l, err)
			}
		}
		_ = cfg.String()
	})
}

// FuzzMatch matches arbitrary descriptors against a configuration that
// holds an arbitrary wildcard value: it must never panic, and a wildcard
// must match exactly what the equivalent regular expression matches.
func FuzzMatch(f *testing.F) {
	f.Add("value*", "k", "valueXYZ", "a=b\nc=d")
	f.Add("/api/*/resource/*/action", "k", "/api/v1/resource/1/action", "")
	f.Add("*", "k", "", "x=")
	f.Add("a*a", "k", "a", "=\n=")
	f.Add("**", "k", "*", "k=v\nn=1")
	f.Fuzz(func(t *testing.T, pattern, key, value, more string) {
		file := rawFile{Domain: "d", Descriptors: []rawDescriptor{
			{Key: "k", Value: pattern, RateLimit: &rawLimit{Unit: "second", RequestsPerUnit: ptr(requestsPerUnit(1))},
				Descriptors: []rawDescriptor{{Key: "n", RateLimit: &rawLimit{Unit: "minute", RequestsPerUnit: ptr(requestsPerUnit(2))}}}},
			{Key: "k", RateLimit: &rawLimit{Unit: "hour", RequestsPerUnit: ptr(requestsPerUnit(3))}},
		}}
		data, err := yaml.Marshal(file)
		if err != nil {
			t.Skip()
		}
		cfg, err := Parse(map[string][]byte{"f.yaml": data}, Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		m := cfg.Match("d", []Entry{{key, value}})
		if key == "k" && strings.Contains(pattern, "*") && pattern != "" {
			want := int64(3)
			if glob(pattern, value) {
				want = 1
			}
			if len(m.Limits) != 1 || m.Limits[0].RequestsPerUnit != want {
				t.Fatalf("pattern %q, value %q: limits %v, want requests_per_unit %d", pattern, value, m.Limits, want)
			}
		}
		if m.Outcome == Limited && (m.Key == "" || len(m.Limits) == 0) {
			t.Fatalf("limited match without key or limits: %+v", m)
		}
		entries := []Entry{{key, value}}
		for _, line := range strings.Split(more, "\n") {
			k, v, _ := strings.Cut(line, "=")
			entries = append(entries, Entry{k, v})
		}
		m = cfg.Match("d", entries)
		for _, h := range m.Hits(1) {
			if err := h.Rule.Validate(); err != nil {
				t.Fatalf("hit with an invalid rule: %v", err)
			}
		}
		_ = cfg.MatchAll("d", [][]Entry{entries, entries[:1]})
		_ = cfg.Match(key, entries)
	})
}

func ptr[T any](v T) *T { return &v }

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "abbc", true},
		{"*", "", true},
		{"**", "x", true},
		{"x*y*x", "xyx", true},
		{"x*y*x", "xyyx", true},
		{"x*y*x", "xy", false},
	}
	for _, tc := range tests {
		if got := globMatch(strings.Split(tc.pattern, "*"), tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// glob is the test's own wildcard match, byte by byte (a pattern or value
// need not be UTF-8): the parts between the stars appear in order, the
// first at the start and the last at the end.
func glob(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(value, parts[0]) {
		return false
	}
	value = value[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(value, p)
		if i < 0 {
			return false
		}
		value = value[i+len(p):]
	}
	return strings.HasSuffix(value, last)
}
