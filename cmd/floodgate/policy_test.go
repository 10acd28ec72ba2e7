package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestCLIReportsWhatTheServiceEnforced runs the service and the CLI on
// one Redis: after the configuration lowered two limits from 10 to 3
// with 10 hits counted, the service denies, and floodgate peek and
// floodgate blocked name each limit by the policy the service reports (a
// limit's name field, or else its descriptor path), and report its
// remaining as the service does (0), with the excess (7 over).
func TestCLIReportsWhatTheServiceEnforced(t *testing.T) {
	conf := func(n int) string {
		dir := t.TempDir()
		text := fmt.Sprintf(`domain: bank
descriptors:
  - key: route
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {name: login_ip, unit: minute, requests_per_unit: %[1]d, algorithm: sliding_window}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: %[1]d, algorithm: sliding_window}
`, n)
		if err := os.WriteFile(filepath.Join(dir, "bank.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	before, after := conf(10), conf(3)
	login := []string{"route=login", "remote_address=192.0.2.7"}
	descriptors := [][]string{login, {"user=alice"}}
	req := &rlsv3.RateLimitRequest{Domain: "bank"}
	for _, d := range descriptors {
		var es []*commonv3.RateLimitDescriptor_Entry
		for _, e := range d {
			k, v, _ := strings.Cut(e, "=")
			es = append(es, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: es})
	}
	addr, prefix := redistest.Addr(t), testPrefix(t)
	serveWith := func(dir string) rlsv3.RateLimitServiceClient {
		return startServe(t, map[string]string{"REDIS_URL": addr, "CACHE_KEY_PREFIX": prefix, "CONFIG_DIR": dir, "DRAFT_RATELIMIT_HEADERS": "true"}).client(t)
	}
	ctx := context.Background()
	c := serveWith(before)
	for i := range 10 {
		if resp, err := c.ShouldRateLimit(ctx, req); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d under 10/minute: %v, %v", i+1, resp, err)
		}
	}
	// The configuration lowers both limits to 3: same names, algorithm
	// and window, so the 10 hits stay counted.
	resp, err := serveWith(after).ShouldRateLimit(ctx, req)
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request under 3/minute with 10 counted: %v, %v; want OVER_LIMIT", resp, err)
	}
	// The service's policies and remaining, from its RateLimit field.
	service := map[string]int64{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() != "RateLimit" {
			continue
		}
		l, err := httpsfv.UnmarshalList([]string{h.GetValue()})
		if err != nil {
			t.Fatalf("RateLimit %q: %v", h.GetValue(), err)
		}
		for _, m := range l {
			it := m.(httpsfv.Item)
			r, _ := it.Params.Get("r")
			service[it.Value.(string)] = r.(int64)
		}
	}
	want := map[string]int64{"login_ip": 0, "bank.user": 0}
	if len(service) != len(want) || service["login_ip"] != 0 || service["bank.user"] != 0 {
		t.Fatalf("the service reports %v in RateLimit; want %v", service, want)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetLimitRemaining() != 0 {
			t.Errorf("status %d: limit_remaining %d; want 0", i, st.GetLimitRemaining())
		}
	}

	// The store's rule and key of each limit, as the service matches them.
	cfg, err := rlconfig.LoadDir(after, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type limit struct{ rule, key string }
	stored := map[string]limit{} // by policy
	for _, d := range descriptors {
		m := matchEntries(cfg, "bank", d)
		for _, l := range m.Limits {
			stored[l.Label] = limit{l.Rule.String(), keyenc.Encode(m.Key)}
		}
	}

	// One line of -o json, as peek and blocked write it.
	type line struct {
		Policy    string `json:"policy"`
		Rule      string `json:"rule"`
		Key       string `json:"key"`
		Remaining int64  `json:"remaining"`
		OverBy    int64  `json:"over_by"`
	}
	lines := func(out string) map[string]line {
		t.Helper()
		got := map[string]line{}
		for _, l := range jsonLines[line](t, out) {
			got[l.Policy] = l
		}
		return got
	}
	check := func(cmd string, got map[string]line, policies ...string) {
		t.Helper()
		if len(got) != len(policies) {
			t.Errorf("%s lists %d limits %v; want %d", cmd, len(got), got, len(policies))
		}
		for _, p := range policies {
			g, ok := got[p]
			if !ok {
				t.Errorf("%s does not name policy %q, which the service reports: %v", cmd, p, got)
				continue
			}
			if g.Remaining != service[p] || g.OverBy != 7 || g.Rule != stored[p].rule {
				t.Errorf("%s: %s remaining %d, %d over, rule %q; want the service's %d, 7 over, rule %q",
					cmd, p, g.Remaining, g.OverBy, g.Rule, service[p], stored[p].rule)
			}
			if cmd == "blocked" && g.Key != stored[p].key {
				t.Errorf("blocked: %s key %q; want the stored %q", p, g.Key, stored[p].key)
			}
		}
	}
	url := "redis://" + addr
	for i, d := range descriptors {
		code, out, errs := cli(t, url, append([]string{"peek", "-config", after, "-domain", "bank", "-prefix", prefix, "-o", "json"}, d...)...)
		if code != 0 {
			t.Fatalf("peek %v = %d %q %q", d, code, out, errs)
		}
		check("peek", lines(out), []string{"login_ip", "bank.user"}[i])
	}
	code, out, errs := cli(t, url, "blocked", "-config", after, "-domain", "bank", "-prefix", prefix, "-o", "json")
	if code != 0 {
		t.Fatalf("blocked = %d %q %q", code, out, errs)
	}
	check("blocked", lines(out), "login_ip", "bank.user")

	// The text: what an on-call greps for, and the store's rule beside it.
	code, out, errs = cli(t, url, append([]string{"peek", "-config", after, "-domain", "bank", "-prefix", prefix}, login...)...)
	if wantText := `login_ip (` + stored["login_ip"].rule + `), key "` + stored["login_ip"].key + `": a request now would be denied; 0 (7 over) left after it;`; code != 0 || !strings.HasPrefix(out, wantText) {
		t.Errorf("peek = %d %q %q; want it to start %q", code, out, errs, wantText)
	}
	code, out, errs = cli(t, url, "blocked", "-config", after, "-domain", "bank", "-prefix", prefix)
	rows := strings.Split(out, "\n")
	ruleName, _, _ := strings.Cut(stored["login_ip"].rule, ":")
	if code != 0 || len(rows) < 3 || strings.Join(strings.Fields(rows[0]), " ") != "POLICY KEY REMAINING RETRY-AFTER RESET RULE" {
		t.Fatalf("blocked = %d %q %q", code, out, errs)
	}
	if f := strings.Fields(rows[2]); len(f) < 5 || f[0] != "login_ip" || f[1] != stored["login_ip"].key || f[2] != "0" || f[3] != "(7" || f[4] != "over)" || f[len(f)-1] != ruleName {
		t.Errorf("blocked's login_ip row = %q; want login_ip, its key, 0 (7 over), ..., rule %s", rows[2], ruleName)
	}
}

// TestRemainingText writes a store's Remaining as the services report it
// (never below zero), with a key's excess over its limit.
func TestRemainingText(t *testing.T) {
	for _, tc := range []struct {
		remaining, shown, over int64
		text                   string
	}{
		{3, 3, 0, "3"},
		{0, 0, 0, "0"},
		{-1, 0, 1, "0 (1 over)"},
		{-7, 0, 7, "0 (7 over)"},
	} {
		shown, over := clampRemaining(tc.remaining)
		if text := remainingText(tc.remaining); shown != tc.shown || over != tc.over || text != tc.text {
			t.Errorf("Remaining %d: %d, %d over, %q; want %d, %d over, %q", tc.remaining, shown, over, text, tc.shown, tc.over, tc.text)
		}
	}
}

// matchEntries matches the KEY=VALUE entries of one descriptor against
// domain of cfg, as the service matches a request's.
func matchEntries(cfg *rlconfig.Config, domain string, kvs []string) rlmatch.Match {
	es := make([]rlmatch.Entry, 0, len(kvs))
	for _, e := range kvs {
		k, v, _ := strings.Cut(e, "=")
		es = append(es, rlmatch.Entry{Key: k, Value: v})
	}
	return (*rlmatch.Config)(cfg).Match(domain, es)
}
