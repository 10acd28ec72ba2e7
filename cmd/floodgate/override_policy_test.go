package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestOverrideNamesThePolicyTheServiceReports sets overrides with -config
// of two limits of the service's configuration, one with a name field and
// one without (its policy is its descriptor path), and checks that
// override set, get, ls -config and rm name each by the policy the
// service reports in RateLimit-Policy for that key (current_limit.name is
// the name field alone, empty without one), with the store's rule
// beside it, in text and in JSON; ls without -config keeps the rule.
func TestOverrideNamesThePolicyTheServiceReports(t *testing.T) {
	dir := t.TempDir()
	conf := `domain: bank
descriptors:
  - key: route
    value: statement
    descriptors:
      - key: account
        rate_limit: {name: statement_per_account, unit: minute, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	if err := os.WriteFile(filepath.Join(dir, "bank.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	descriptors := [][]string{{"route=statement", "account=acct-5"}, {"user=alice"}}
	addr, prefix := redistest.Addr(t), testPrefix(t)
	url := "redis://" + addr
	override := func(args ...string) (int, string, string) {
		t.Helper()
		return cli(t, url, append([]string{"override", args[0], "-config", dir, "-domain", "bank", "-prefix", prefix}, args[1:]...)...)
	}
	for _, d := range descriptors {
		if code, out, errs := override(append([]string{"set", "-limit", "4/1m"}, d...)...); code != 0 {
			t.Fatalf("override set %v = %d %q %q", d, code, out, errs)
		}
	}
	// An override of a rule the configuration does not have.
	if code, out, errs := cli(t, url, "override", "set", "-prefix", prefix, "-rule", "api", "-limit", "5/1m", "customer-42"); code != 0 {
		t.Fatalf("override set -rule api = %d %q %q", code, out, errs)
	}

	// The service, with the overrides in force: the policy it reports
	// each descriptor's limit by, in RateLimit-Policy.
	c := startServe(t, map[string]string{"REDIS_URL": addr, "CACHE_KEY_PREFIX": prefix, "CONFIG_DIR": dir, "DRAFT_RATELIMIT_HEADERS": "true"}).client(t)
	reported := func(d []string) (policy string, q int64) {
		t.Helper()
		var es []*commonv3.RateLimitDescriptor_Entry
		for _, e := range d {
			k, v, _ := strings.Cut(e, "=")
			es = append(es, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "bank",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: es}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit %v: %v", d, err)
		}
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() != "RateLimit-Policy" {
				continue
			}
			l, err := httpsfv.UnmarshalList([]string{h.GetValue()})
			if err != nil || len(l) != 1 {
				t.Fatalf("%v: RateLimit-Policy %q: %v; want one member", d, h.GetValue(), err)
			}
			it := l[0].(httpsfv.Item)
			qv, _ := it.Params.Get("q")
			return it.Value.(string), qv.(int64)
		}
		t.Fatalf("%v: no RateLimit-Policy in %v", d, resp)
		return "", 0
	}

	// Each limit's policy (the service's), the store's rule and key
	// (the configuration's, as the service matches it).
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type limit struct{ policy, rule, key, alg string }
	var limits []limit
	for _, d := range descriptors {
		m := matchEntries(cfg, "bank", d)
		if len(m.Limits) != 1 {
			t.Fatalf("%v matches %d limits; want 1", d, len(m.Limits))
		}
		policy, q := reported(d)
		if q != 4 {
			t.Fatalf("the service's RateLimit-Policy for %v: %s;q=%d; want the override's 4", d, policy, q)
		}
		l := limit{policy, m.Limits[0].Rule.Name, m.Key, m.Limits[0].Rule.Algorithm.String()}
		if l.policy == "" || l.policy == l.rule {
			t.Fatalf("the service reports %v by %q; want a policy other than the rule %q", d, l.policy, l.rule)
		}
		limits = append(limits, l)
	}
	if limits[0].policy == limits[1].policy {
		t.Fatalf("both limits are reported as %q", limits[0].policy)
	}

	// The text: the policy, then the store's rule in parentheses.
	for i, d := range descriptors {
		l := limits[i]
		named := l.policy + " (" + l.rule + ": 4/1m0s " + l.alg + ") for key " + strconv.Quote(l.key) + ", no expiry"
		if code, out, errs := override(append([]string{"set", "-limit", "4/1m"}, d...)...); code != 0 || !strings.HasPrefix(out, "set "+named+";") {
			t.Errorf("override set %v = %d %q %q; want it to start %q", d, code, out, errs, "set "+named+";")
		}
		if code, out, errs := override(append([]string{"get"}, d...)...); code != 0 || out != named+"\n" {
			t.Errorf("override get %v = %d %q %q; want %q", d, code, out, errs, named+"\n")
		}
	}
	// The JSON: policy and rule, as peek and blocked write them.
	type entry struct {
		Policy string `json:"policy"`
		Rule   string `json:"rule"`
		Key    string `json:"key"`
		Limit  int64  `json:"limit"`
	}
	check := func(cmd string, got, want entry) {
		t.Helper()
		if got != want {
			t.Errorf("%s -o json = %+v; want %+v", cmd, got, want)
		}
	}
	for i, d := range descriptors {
		l := limits[i]
		want := entry{l.policy, l.rule, l.key, 4}
		code, out, errs := override(append([]string{"set", "-limit", "4/1m", "-o", "json"}, d...)...)
		var set struct{ Set entry }
		if code != 0 || json.Unmarshal([]byte(out), &set) != nil {
			t.Fatalf("override set -o json %v = %d %q %q", d, code, out, errs)
		}
		check("set", set.Set, want)
		code, out, errs = override(append([]string{"get", "-o", "json"}, d...)...)
		var got entry
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("override get -o json %v = %d %q %q", d, code, out, errs)
		}
		check("get", got, want)
	}

	// ls -config: the configuration's overrides under their policies, in
	// a POLICY column with the rule beside them; api keeps its name.
	code, out, errs := override("ls")
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(rows) != 5 || strings.Join(strings.Fields(rows[0]), " ") != "POLICY KEY LIMIT ALGORITHM EXPIRES RULE" || rows[4] != "3 override(s)" {
		t.Fatalf("override ls -config = %d %q %q; want a POLICY header, 3 rows and a count", code, out, errs)
	}
	byPolicy := map[string][]string{}
	for _, r := range rows[1:4] {
		f := strings.Fields(r)
		byPolicy[f[0]] = f
	}
	for _, l := range append(limits, limit{"api", "api", "customer-42", "sliding-window"}) {
		want := []string{l.policy, strconv.Quote(l.key), map[bool]string{true: "5/1m0s", false: "4/1m0s"}[l.rule == "api"], l.alg, "never", l.rule}
		if got := byPolicy[l.policy]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("override ls -config: the row of %s = %q; want %q", l.policy, got, want)
		}
	}
	code, out, errs = override("ls", "-o", "json")
	got := map[string]entry{}
	for _, e := range jsonLines[entry](t, out) {
		got[e.Policy] = e
	}
	if code != 0 || len(got) != 3 {
		t.Fatalf("override ls -config -o json = %d %q %q; want 3 entries", code, out, errs)
	}
	for _, l := range limits {
		check("ls -config", got[l.policy], entry{l.policy, l.rule, l.key, 4})
	}
	check("ls -config", got["api"], entry{"api", "api", "customer-42", 5})

	if code, out, errs := override("ls", "-domain", "nope"); code != 2 || out != "" || !strings.Contains(errs, `domain "nope" has no counted limit`) {
		t.Errorf("override ls -config -domain nope = %d %q %q; want 2: no such domain", code, out, errs)
	}

	// Without -config, ls knows no policy: the rules, as before,
	code, out, errs = cli(t, url, "override", "ls", "-prefix", prefix)
	if rows := strings.Split(out, "\n"); code != 0 || len(rows) < 4 || strings.Join(strings.Fields(rows[0]), " ") != "RULE KEY LIMIT ALGORITHM EXPIRES" ||
		!strings.Contains(out, "\n"+limits[0].rule+" ") || !strings.Contains(out, "\n"+limits[1].rule+" ") {
		t.Errorf("override ls = %d %q %q; want the RULE header and the rules %s, %s", code, out, errs, limits[0].rule, limits[1].rule)
	}

	// and -o json names each by its rule, as a Limiter reports it.
	code, out, errs = cli(t, url, "override", "ls", "-prefix", prefix, "-o", "json")
	byRule := map[string]entry{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("override ls -o json = %d %q %q: %v", code, out, errs, err)
		}
		byRule[e.Rule] = e
	}
	for _, l := range limits {
		check("ls", byRule[l.rule], entry{l.rule, l.rule, l.key, 4})
	}

	// rm: the policy, with the rule beside it.
	code, out, errs = override(append([]string{"rm"}, descriptors[0]...)...)
	if want := "removed the override of key " + strconv.Quote(limits[0].key) + " under " + limits[0].policy + " (rule " + limits[0].rule + ");"; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("override rm %v = %d %q %q; want it to start %q", descriptors[0], code, out, errs, want)
	}
	code, out, errs = override(append([]string{"rm", "-o", "json"}, descriptors[1]...)...)
	var rm struct {
		entry
		Removed bool `json:"removed"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rm) != nil || !rm.Removed {
		t.Fatalf("override rm -o json %v = %d %q %q", descriptors[1], code, out, errs)
	}
	check("rm", entry{rm.Policy, rm.Rule, rm.Key, 0}, entry{limits[1].policy, limits[1].rule, limits[1].key, 0})
	code, out, errs = override(append([]string{"get"}, descriptors[1]...)...)
	if want := "no override of key " + strconv.Quote(limits[1].key) + " under " + limits[1].policy + " (rule " + limits[1].rule + ")"; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("override get %v after rm = %d %q %q; want it to start %q", descriptors[1], code, out, errs, want)
	}
}
