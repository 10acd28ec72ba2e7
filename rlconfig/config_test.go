package rlconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestInvalid checks that each refused configuration names its problem,
// its file and its path, and wraps ErrInvalidConfig.
func TestInvalid(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings, each in the error
	}{
		{"empty domain", map[string]string{"a.yaml": "descriptors: []\n"},
			[]string{"a.yaml: domain is empty"}},
		{"empty file", map[string]string{"a.yaml": ""},
			[]string{"a.yaml: domain is empty"}},
		{"bad yaml", map[string]string{"a.yaml": "domain: [x\n"},
			[]string{"a.yaml: not valid YAML"}},
		{"list of scalars", map[string]string{"a.yaml": "domain: d\ndescriptors: [a, b]\n"},
			[]string{"a.yaml: line 2: cannot unmarshal"}},
		{"unknown top-level field", map[string]string{"a.yaml": "domain: d\ndomian: x\n"},
			[]string{"a.yaml: line 2: field domian not found in the top level"}},
		{"misspelled descriptor field", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second, requests_per_unit: 1}\n"},
			[]string{"line 4: field ratelimit not found in a descriptor"}},
		{"misspelled limit field", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, request_per_unit: 1}\n"},
			[]string{"field request_per_unit not found in a rate limit"}},
		{"field at the wrong level", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    unit: second\n"},
			[]string{"field unit not found in a descriptor"}},
		{"duplicate mapping key", map[string]string{"a.yaml": "domain: d\ndomain: e\n"},
			[]string{"a.yaml:", "already defined"}},
		{"empty key", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - value: v\n"},
			[]string{"a.yaml: d.descriptors[0]: descriptor has an empty key"}},
		{"duplicate key value", map[string]string{"a.yaml": `
domain: d
descriptors:
  - key: k
    value: v
  - key: k
    value: v
`}, []string{"a.yaml: d.k_v: duplicate descriptor"}},
		{"duplicate key without value", map[string]string{"a.yaml": `
domain: d
descriptors:
  - key: k
    descriptors:
      - key: a
      - key: a
`}, []string{"a.yaml: d.k.a: duplicate descriptor"}},
		{"duplicate wildcard", map[string]string{"a.yaml": `
domain: d
descriptors:
  - key: k
    value: "a*"
  - key: k
    value: "a*"
`}, []string{"a.yaml: d.k_a*: duplicate descriptor"}},
		{"duplicate domain", map[string]string{
			"a.yaml": "domain: d\n",
			"b.yaml": "domain: d\n",
		}, []string{`b.yaml: domain "d" is also defined in a.yaml`}},
		{"bad unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"},
			[]string{`a.yaml: d.k: invalid rate limit unit "fortnight"`}},
		{"unknown unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n"},
			[]string{`invalid rate limit unit "unknown"`}},
		{"missing unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n"},
			[]string{"a.yaml: d.k: a rate limit needs a unit"}},
		{"missing requests_per_unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n"},
			[]string{"a.yaml: d.k: requests_per_unit is missing"}},
		{"negative requests_per_unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n"},
			[]string{"requests_per_unit -1 is outside 0 to 4294967295"}},
		{"fractional requests_per_unit and burst", map[string]string{"a.yaml": "domain: d\nalgorithm: token_bucket\nburst: 2.5\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0.5}\n"},
			[]string{"a.yaml: line 3: burst 2.5 is not a whole number", "a.yaml: line 6: requests_per_unit 0.5 is not a whole number"}},
		{"unlimited with unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n"},
			[]string{"a.yaml: d.k: unit must not be set on an unlimited limit"}},
		{"replaces empty", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n"},
			[]string{"a.yaml: d.k: a replaces entry has an empty name"}},
		{"replaces self", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n"},
			[]string{`a.yaml: d.k: replaces names the limit itself ("n")`}},
		{"share_threshold without wildcard", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"},
			[]string{"a.yaml: d.k_v: share_threshold needs a wildcard value"}},
		{"two documents", map[string]string{"a.yaml": "domain: d\n---\ndomain: e\n"},
			[]string{"a.yaml: holds more than one YAML document"}},
		{"unit and window", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, window: 1s, requests_per_unit: 1}\n"},
			[]string{"a.yaml: d.k: set unit or window, not both"}},
		{"bad window", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 90, requests_per_unit: 1}\n"},
			[]string{`a.yaml: d.k: window "90" is not a duration`}},
		{"window too short for floodgate", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 10us, requests_per_unit: 1}\n"},
			[]string{"a.yaml: d.k: floodgate: invalid rule", "window is 10µs, must be at least 1ms"}},
		{"sliding window limit too high", map[string]string{"a.yaml": "domain: d\nalgorithm: sliding_window\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2000000}\n"},
			[]string{"a.yaml: d.k:", "limit 2000000 is above 1000000"}},
		{"burst without token bucket", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    burst: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
			[]string{"a.yaml: d.k:", "burst is only meaningful for token-bucket"}},
		{"bad algorithm", map[string]string{"a.yaml": "domain: d\nalgorithm: leaky\n"},
			[]string{`a.yaml: d: unknown algorithm "leaky"`}},
		{"concurrency: no request ends in the RLS API", map[string]string{"a.yaml": "domain: d\nalgorithm: concurrency\n"},
			[]string{`a.yaml: d: unknown algorithm "concurrency"`}},
		{"bad failure mode", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    failure_mode: sideways\n"},
			[]string{`a.yaml: d.k: unknown failure_mode "sideways"`}},
		{"rate_limit and rate_limits", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: second, requests_per_unit: 1}]\n"},
			[]string{"a.yaml: d.k: set rate_limit or rate_limits, not both"}},
		{"empty rate_limits", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n"},
			[]string{"a.yaml: d.k: rate_limits is empty"}},
		{"unlimited in rate_limits", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unlimited: true}]\n"},
			[]string{"a.yaml: d.k.rate_limits[0]: unlimited is not allowed"}},
		{"bad item of rate_limits", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 1}, {unit: eon, requests_per_unit: 1}]\n"},
			[]string{`a.yaml: d.k.rate_limits[1]: invalid rate limit unit "eon"`}},
		{"every problem at once", map[string]string{
			"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: j\n    rate_limit: {unit: second}\n",
			"b.yaml": "domain: e\nbogus: 1\n",
			"c.yaml": "domain: d\n",
		}, []string{"a.yaml: d.k: invalid rate limit unit", "a.yaml: d.j: requests_per_unit is missing", "b.yaml: line 2: field bogus", `c.yaml: domain "d" is also defined in a.yaml`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := rlconfig.LoadDir(writeDir(t, tc.files), rlconfig.Options{})
			if err == nil {
				t.Fatalf("LoadDir accepted it: %v", cfg)
			}
			if cfg != nil {
				t.Errorf("LoadDir returned a configuration with its error")
			}
			if !errors.Is(err, rlconfig.ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestInvalidRuleWrapsBoth(t *testing.T) {
	_, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 10us, requests_per_unit: 1}\n")}, rlconfig.Options{})
	if !errors.Is(err, rlconfig.ErrInvalidConfig) || !errors.Is(err, floodgate.ErrInvalidRule) {
		t.Errorf("want both ErrInvalidConfig and floodgate.ErrInvalidRule: %v", err)
	}
}

// TestAccepted checks what upstream accepts that a strict reader could
// wrongly refuse.
func TestAccepted(t *testing.T) {
	cfg := load(t, map[string]string{"a.yaml": `
domain: d
descriptors:
  - key: phone
    value: 2061234567        # a number where a string is expected
    rate_limit: {unit: SECOND, requests_per_unit: 1}   # units in any case
  - key: l
    rate_limit:
      unlimited: true
      requests_per_unit: 7   # ignored, as upstream does
      unit: fortnight        # an invalid unit on an unlimited limit is ignored upstream
  - key: q
    quota_mode: true
    value_to_metric: true
    metadata:
      team: payments
      tags: [a, b]
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: m
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 4294967295, algorithm: token_bucket}
  - key: leaf                # no limit and no children: allowed
`})
	m := cfg.Match("d", e("phone", "2061234567"))
	if m.Outcome != rlmatch.Limited || m.Limits[0].Unit != rlmatch.Second {
		t.Errorf("numeric value: %+v", m)
	}
	m = cfg.Match("d", e("q", "x"))
	if !m.Limits[0].QuotaMode || m.Metadata["team"] != "payments" || m.Limits[0].Rule.Window != 7*24*time.Hour {
		t.Errorf("q: %+v %+v", m, m.Limits[0])
	}
	if w := cfg.Match("d", e("m", "x")).Limits[0].Rule.Window; w != 30*24*time.Hour {
		t.Errorf("month window %v", w)
	}
	if w := cfg.Match("d", e("y", "x")).Limits[0].Rule.Window; w != 365*24*time.Hour {
		t.Errorf("year window %v", w)
	}
	if m := cfg.Match("d", e("l", "x")); m.Outcome != rlmatch.Unlimited {
		t.Errorf("unlimited: %v", m.Outcome)
	}
	if m := cfg.Match("d", e("leaf", "x")); m.Outcome != rlmatch.NoLimit || m.Path != "d.leaf" {
		t.Errorf("leaf: %+v", m)
	}
}

// TestExtensions checks algorithm, burst, window, rate_limits and
// failure_mode, with their defaults and inheritance.
func TestExtensions(t *testing.T) {
	cfg := load(t, map[string]string{
		"plain.yaml": `
domain: plain
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`,
		"ext.yaml": `
domain: ext
algorithm: sliding_window
failure_mode: open
descriptors:
  - key: inherit
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bucket
    algorithm: token_bucket
    burst: 20
    failure_mode: local
    rate_limit: {window: 1s, requests_per_unit: 5}
    descriptors:
      - key: nested
        rate_limit: {window: 90s, requests_per_unit: 30}
      - key: reset
        algorithm: fixed_window
        failure_mode: closed
        rate_limit: {window: 60s, requests_per_unit: 30}
  - key: multi
    failure_mode: error
    shadow_mode: true
    rate_limits:
      - {window: 1s, requests_per_unit: 10, algorithm: token_bucket, burst: 20, shadow_mode: false}
      - {window: 90s, requests_per_unit: 300}
      - {name: daily, unit: day, requests_per_unit: 10000, algorithm: sliding_window_counter}
`,
	})
	type r struct {
		Limit  int64
		Window time.Duration
		Alg    floodgate.Algorithm
		Burst  int64
		Unit   rlmatch.Unit
		Shadow bool
		Label  string
	}
	tests := []struct {
		name    string
		domain  string
		entries []rlmatch.Entry
		failure enforce.FailureMode
		want    []r
	}{
		{"unchanged file: fixed window, error", "plain", e("k", "x"), enforce.FailError,
			[]r{{10, time.Minute, floodgate.FixedWindow, 0, rlmatch.Minute, false, "plain.k"}}},
		{"domain defaults", "ext", e("inherit", "x"), enforce.FailOpen,
			[]r{{10, time.Minute, floodgate.SlidingWindow, 0, rlmatch.Minute, false, "ext.inherit"}}},
		{"descriptor overrides", "ext", e("bucket", "x"), enforce.FailLocal,
			[]r{{5, time.Second, floodgate.TokenBucket, 20, rlmatch.Second, false, "ext.bucket"}}},
		{"nested inherits the descriptor", "ext", e("bucket", "x", "nested", "y"), enforce.FailLocal,
			[]r{{30, 90 * time.Second, floodgate.TokenBucket, 20, rlmatch.UnitUnknown, false, "ext.bucket.nested"}}},
		{"an algorithm resets the burst", "ext", e("bucket", "x", "reset", "y"), enforce.FailClosed,
			[]r{{30, time.Minute, floodgate.FixedWindow, 0, rlmatch.Minute, false, "ext.bucket.reset"}}},
		{"rate_limits", "ext", e("multi", "x"), enforce.FailError, []r{
			{10, time.Second, floodgate.TokenBucket, 20, rlmatch.Second, false, "ext.multi"},
			{300, 90 * time.Second, floodgate.SlidingWindow, 0, rlmatch.UnitUnknown, true, "ext.multi#2"},
			{10000, 24 * time.Hour, floodgate.SlidingWindowCounter, 0, rlmatch.Day, true, "daily"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := cfg.Match(tc.domain, tc.entries)
			if m.FailureMode != tc.failure {
				t.Errorf("FailureMode = %v, want %v", m.FailureMode, tc.failure)
			}
			var gotR []r
			for _, l := range m.Limits {
				if err := l.Rule.Validate(); err != nil {
					t.Errorf("rule %v: %v", l.Rule, err)
				}
				gotR = append(gotR, r{l.Rule.Limit, l.Rule.Window, l.Rule.Algorithm, l.Rule.Burst, l.Unit, l.ShadowMode, l.Label})
			}
			if !reflect.DeepEqual(gotR, tc.want) {
				t.Errorf("limits =\n  %+v\nwant\n  %+v", gotR, tc.want)
			}
			if h := m.Hits(1); len(h) != len(tc.want) {
				t.Errorf("%d hits for %d limits", len(h), len(tc.want))
			}
		})
	}
}

// TestRuleNames checks that rule names are valid, stable across loads,
// distinct between nodes, and independent of the limit's value.
func TestRuleNames(t *testing.T) {
	long := strings.Repeat("x", 200)
	files := map[string]string{"a.yaml": `
domain: names
descriptors:
  - key: k
    value: "a b/c{d}"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "a_b_c_d_"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k_a
    value: b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: a_b
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: minute, requests_per_unit: 1}
  - key: ` + long + `
    descriptors:
      - key: ` + long + `
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: ` + long + `y
        rate_limit: {unit: second, requests_per_unit: 1}
`}
	names := func(cfg *rlconfig.Config) []string {
		var ns []string
		for _, l := range cfg.Limits() {
			ns = append(ns, l.Rule.Name)
		}
		return ns
	}
	a := names(load(t, files))
	seen := map[string]bool{}
	for _, n := range a {
		if err := (floodgate.Rule{Name: n, Limit: 1, Window: time.Second}).Validate(); err != nil {
			t.Errorf("invalid name %q: %v", n, err)
		}
		if seen[n] {
			t.Errorf("name %q used twice", n)
		}
		seen[n] = true
	}
	if len(a) != 7 {
		t.Fatalf("%d limits, want 7", len(a))
	}
	if !strings.HasPrefix(a[0], "names.k_a_b_c_d_-") {
		t.Errorf("name %q lacks its readable prefix", a[0])
	}
	// The same file loads to the same names; a changed limit, unit or
	// algorithm keeps the name (floodgate keys state by window and
	// algorithm as well).
	if b := names(load(t, files)); !reflect.DeepEqual(a, b) {
		t.Errorf("names changed across loads:\n%v\n%v", a, b)
	}
	changed := strings.Replace(files["a.yaml"], `value: "a b/c{d}"
    rate_limit: {unit: second, requests_per_unit: 1}`, `value: "a b/c{d}"
    rate_limit: {unit: hour, requests_per_unit: 99, algorithm: token_bucket}`, 1)
	if c := names(load(t, map[string]string{"other.yaml": changed})); c[0] != a[0] {
		t.Errorf("a changed limit renamed its rule: %q, was %q", c[0], a[0])
	}
}

// TestLoadDir checks which files a directory contributes.
func TestLoadDir(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"a.yaml":       "domain: a\n",
		"b.yml":        "domain: b\n",
		"notes.txt":    "not yaml",
		".hidden.yaml": "domain: [broken\n",
		"c.yaml~":      "domain: [broken\n",
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub.yaml", "x.yaml"), []byte("domain: [broken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "gone.yaml"), filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Domains(); !reflect.DeepEqual(d, []string{"a", "b"}) {
		t.Errorf("Domains = %v", d)
	}
	if f := cfg.Files(); !reflect.DeepEqual(f, []string{"a.yaml", "b.yml"}) {
		t.Errorf("Files = %v", f)
	}
	// What envoyproxy/ratelimit would have read is reported, not dropped
	// unseen.
	if s := cfg.Skipped(); !reflect.DeepEqual(s, []string{"c.yaml~", "notes.txt", "sub.yaml/"}) {
		t.Errorf("Skipped = %v", s)
	}
	empty, err := rlconfig.LoadDir(t.TempDir(), rlconfig.Options{})
	if err != nil || len(empty.Domains()) != 0 {
		t.Errorf("empty directory: %v %v", empty, err)
	}
	if _, err := rlconfig.LoadDir(filepath.Join(dir, "missing"), rlconfig.Options{}); err == nil || errors.Is(err, rlconfig.ErrInvalidConfig) {
		t.Errorf("missing directory: %v", err)
	}
}

// TestLoadDirOddFiles: a configuration file that is a FIFO, a device or
// too large is refused at once, naming it; reading it would block for
// ever or exhaust the memory.
func TestLoadDirOddFiles(t *testing.T) {
	fifo := writeDir(t, map[string]string{"a.yaml": "domain: a\n"})
	if err := syscall.Mkfifo(filepath.Join(fifo, "b.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	device := writeDir(t, map[string]string{"a.yaml": "domain: a\n"})
	if err := os.Symlink("/dev/zero", filepath.Join(device, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	big := writeDir(t, map[string]string{"a.yaml": "domain: a\n"})
	if err := os.WriteFile(filepath.Join(big, "big.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(big, "big.yaml"), maxFileSize+1); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{fifo: "b.yaml: not a regular file", device: "zero.yaml: not a regular file", big: "big.yaml: 16777217 bytes, more than the 16777216"} {
		done := make(chan error, 1)
		go func() {
			_, err := rlconfig.LoadDir(dir, rlconfig.Options{})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, rlconfig.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
				t.Errorf("LoadDir: %v, want an invalid configuration saying %q", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("LoadDir did not return within 5s (want %q)", want)
		}
	}
	// Exactly the bound is read.
	if err := os.Truncate(filepath.Join(big, "big.yaml"), maxFileSize); err != nil {
		t.Fatal(err)
	}
	if _, err := rlconfig.LoadDir(big, rlconfig.Options{}); err == nil || strings.Contains(err.Error(), "more than") {
		t.Errorf("a file of exactly 16 MiB: %v, want it read (and refused as a file of NUL bytes)", err)
	}
}

func TestMergeDomains(t *testing.T) {
	files := map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
	}
	cfg, err := rlconfig.LoadDir(writeDir(t, files), rlconfig.Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := cfg.Match("d", e("a", "x")), cfg.Match("d", e("b", "x")); a.Outcome != rlmatch.Limited || b.Outcome != rlmatch.Limited || b.Limits[0].File != "b.yaml" {
		t.Errorf("merged: %+v %+v", a, b)
	}
	files["c.yaml"] = "domain: d\ndescriptors:\n  - key: a\n"
	_, err = rlconfig.LoadDir(writeDir(t, files), rlconfig.Options{MergeDomains: true})
	if err == nil || !strings.Contains(err.Error(), "c.yaml: d.a: duplicate descriptor") || !strings.Contains(err.Error(), "(in a.yaml)") {
		t.Errorf("a duplicate across merged files: %v", err)
	}
}

// TestDocExample loads the extension example of the package doc.
func TestDocExample(t *testing.T) {
	cfg := load(t, map[string]string{"api.yaml": `
domain: api
algorithm: sliding_window     # the whole domain counts exactly
failure_mode: open            # error (default), closed, open or local
descriptors:
  - key: user
    rate_limits:              # several limits on one key, checked together
      - {window: 1s, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
      - {window: 90s, requests_per_unit: 300}
      - {unit: day, requests_per_unit: 10000, algorithm: sliding_window_counter,
         shadow_mode: true}
`})
	m := cfg.Match("api", e("user", "ana"))
	if m.Outcome != rlmatch.Limited || len(m.Limits) != 3 || m.FailureMode != enforce.FailOpen || !m.Limits[2].ShadowMode {
		t.Errorf("doc example: %+v", m)
	}
}

// TestWholeNumbers: requests_per_unit and burst take an integer in any
// YAML form, or a float without fraction.
func TestWholeNumbers(t *testing.T) {
	for _, tc := range []struct{ rpu, burst string }{{"1e3", "2.0"}, {"0x3e8", "2"}, {"1000.0", "0o2"}} {
		y := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + tc.rpu + ", algorithm: token_bucket, burst: " + tc.burst + "}\n"
		cfg, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte(y)}, rlconfig.Options{})
		if err != nil {
			t.Errorf("%v: %v", tc, err)
			continue
		}
		if l := cfg.Limits()[0]; l.RequestsPerUnit != 1000 || l.Rule.Burst != 2 {
			t.Errorf("%v: %d per second, burst %d; want 1000 and 2", tc, l.RequestsPerUnit, l.Rule.Burst)
		}
	}
}

// maxFileSize is the bound that LoadDir's doc states: 16 MiB.
const maxFileSize = 16 << 20
