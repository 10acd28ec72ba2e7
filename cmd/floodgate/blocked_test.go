package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// listed is one line of floodgate blocked -o json.
type listed struct {
	Rule         string `json:"rule"`
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Hashed       bool   `json:"hashed"`
	Node         string `json:"node"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
}

// parseListed reads floodgate blocked's JSON lines, by policy and key.
func parseListed(t *testing.T, out string) map[string]listed {
	t.Helper()
	got := map[string]listed{}
	for _, l := range jsonLines[listed](t, out) {
		if _, dup := got[l.Policy+" "+l.Key]; dup {
			t.Fatalf("%s %q listed twice", l.Policy, l.Key)
		}
		got[l.Policy+" "+l.Key] = l
	}
	return got
}

// jsonLines decodes out, one JSON value of T per line (a command's -o
// json).
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		vs = append(vs, v)
	}
	return vs
}

// newLimiter returns a limiter on url under prefix, closed with the test.
func newLimiter(t *testing.T, url, prefix string) *floodgate.Limiter {
	t.Helper()
	store, err := redisstore.New(context.Background(), redisstore.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testPrefix(t *testing.T) string {
	return "blk" + strings.ReplaceAll(t.Name(), "/", "-") + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// TestBlocked blocks keys of every algorithm, plain and hashed, next to
// keys that still have room and keys of rules not asked for, and checks
// that floodgate blocked lists exactly the blocked ones with the figures
// the store gives, on a standalone Redis and on a Cluster; then it
// unlocks a hashed key with floodgate reset and its original key.
func TestBlocked(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 1)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testPrefix(t)
			l := newLimiter(t, url, prefix)
			specs := map[string]string{
				"login": "name=login,limit=3/10m",
				"api":   "name=api,limit=2/1m,algorithm=token-bucket",
				"pix":   "name=pix,limit=2/1h,algorithm=fixed-window",
				"stmt":  "name=stmt,limit=2/1m,algorithm=sliding-window-counter",
			}
			rules := map[string]floodgate.Rule{}
			for n, spec := range specs {
				r, err := parseRule(spec)
				if err != nil {
					t.Fatal(err)
				}
				rules[n] = r
			}
			hashedKey := "{braces} and\nnewline"
			longKey := strings.Repeat("customer-", 10)
			type setup struct {
				rule string
				key  string
				hits int
			}
			var blockedWant []setup
			for _, s := range []setup{
				{"login", "alice@example.com", 3}, // blocked
				{"login", "bob@example.com", 2},   // one left
				{"login", hashedKey, 3},           // blocked, hashed
				{"api", "acct-1", 2},              // blocked
				{"api", "acct-2", 1},
				{"api", longKey, 2}, // blocked, hashed
				{"pix", "acct-1", 2},
				{"pix", "acct-3", 1},
				{"stmt", "acct-9", 2},
				{"stmt", "acct-8", 1},
			} {
				for range s.hits {
					if d, err := l.Allow(ctx, rules[s.rule], s.key); err != nil || !d.Allowed {
						t.Fatalf("%s %q: %+v, %v", s.rule, s.key, d, err)
					}
				}
				if int64(s.hits) == rules[s.rule].Capacity() {
					blockedWant = append(blockedWant, s)
				}
			}
			// Another rule of the same name and another window, and a rule
			// not asked for: their keys are not the listed rules' keys.
			other := floodgate.Rule{Name: "login", Limit: 1, Window: time.Hour}
			notAsked := floodgate.Rule{Name: "export", Limit: 1, Window: time.Hour}
			for _, r := range []floodgate.Rule{other, notAsked} {
				if d, err := l.Allow(ctx, r, "carol"); err != nil || !d.Allowed {
					t.Fatalf("%v: %+v, %v", r, d, err)
				}
			}

			args := []string{"blocked", "-prefix", prefix, "-o", "json"}
			for _, n := range []string{"login", "api", "pix", "stmt"} {
				args = append(args, "-rule", specs[n])
			}
			code, out, errs := cli(t, url, args...)
			if code != 0 {
				t.Fatalf("blocked = %d %q %q", code, out, errs)
			}
			got := parseListed(t, out)
			if len(got) != len(blockedWant) {
				t.Errorf("listed %d keys, want %d: %s", len(got), len(blockedWant), out)
			}
			for _, s := range blockedWant {
				enc := keyenc.Encode(s.key)
				g, ok := got[s.rule+" "+enc]
				if !ok {
					t.Errorf("%s %q (stored as %q) is blocked but not listed: %s", s.rule, s.key, enc, out)
					continue
				}
				d, err := l.Peek(ctx, floodgate.Hit{Rule: rules[s.rule], Key: s.key, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				// The listing ran before this Peek: its waits are at most
				// as long, and by no more than the time between the two.
				slack := int64(2000)
				if d.Allowed || g.Remaining != 0 || g.Hashed != (enc != s.key) || g.Rule != rules[s.rule].String() ||
					g.RetryAfterMS < d.RetryAfter.Milliseconds() || g.RetryAfterMS > d.RetryAfter.Milliseconds()+slack ||
					g.ResetAfterMS < d.ResetAfter.Milliseconds() || g.ResetAfterMS > d.ResetAfter.Milliseconds()+slack {
					t.Errorf("%s %q: listed %+v; the store says %+v", s.rule, s.key, g, d)
				}
				wantNode := redistest.Addr(t)
				if name == "cluster" {
					sk, err := rediskeys.StateKey(prefix, rules[s.rule], s.key)
					if err != nil {
						t.Fatal(err)
					}
					slot, err := cluster.KeySlot(sk)
					if err != nil {
						t.Fatal(err)
					}
					master, err := cluster.MasterOf(slot)
					if err != nil {
						t.Fatal(err)
					}
					wantNode = master.Addr()
				}
				if g.Node != wantNode {
					t.Errorf("%s %q: found on %s, want its master %s", s.rule, s.key, g.Node, wantNode)
				}
			}

			// The text listing names the hashed keys as such, and says that
			// reset takes the original key.
			code, out, _ = cli(t, url, slices.Concat(args[:3], args[5:])...)
			if code != 0 || !strings.Contains(out, keyenc.Encode(hashedKey)+" (hashed)") ||
				!strings.Contains(out, "floodgate reset takes the original key") ||
				!strings.Contains(out, "6 key(s) blocked") || !strings.Contains(out, "alice@example.com") {
				t.Errorf("text listing = %d %q", code, out)
			}

			if code, out, errs := cli(t, url, "reset", "-rule", specs["login"], "-prefix", prefix, hashedKey); code != 0 {
				t.Fatalf("reset = %d %q %q", code, out, errs)
			}
			_, out, _ = cli(t, url, args...)
			got = parseListed(t, out)
			if _, ok := got["login "+keyenc.Encode(hashedKey)]; ok || len(got) != len(blockedWant)-1 {
				t.Errorf("after resetting the hashed key: %s", out)
			}
		})
	}
}

// TestBlockedMany lists more keys than one SCAN call and one peek call
// carry, half of them hashed, and stops at -limit with a note.
func TestBlockedMany(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testPrefix(t)
			l := newLimiter(t, url, prefix)
			rule := floodgate.Rule{Name: "otp", Limit: 1, Window: time.Hour, Algorithm: floodgate.FixedWindow}
			const n = 600
			for i := range n {
				key := fmt.Sprintf("user-%d", i)
				if i%2 == 1 {
					key = fmt.Sprintf("user %d", i) // a space: hashed
				}
				if i%3 == 0 {
					continue // never seen
				}
				if d, err := l.Allow(ctx, rule, key); err != nil || !d.Allowed {
					t.Fatalf("%+v, %v", d, err)
				}
			}
			want := n - n/3
			code, out, errs := cli(t, url, "blocked", "-rule", "name=otp,limit=1/1h,algorithm=fixed-window", "-prefix", prefix, "-limit", "1000", "-o", "json", "-progress", "1ns")
			got := parseListed(t, out)
			hashed := 0
			for _, g := range got {
				if g.Hashed {
					hashed++
				}
			}
			if code != 0 || len(got) != want || hashed != want/2 || !strings.Contains(errs, "keys of the rules scanned") ||
				!strings.Contains(errs, fmt.Sprintf("%d key(s) blocked; %d key(s)", want, want)) {
				t.Fatalf("blocked = %d, %d keys listed (%d hashed), want %d (%d); stderr %q", code, len(got), hashed, want, want/2, errs)
			}
			if strings.Contains(errs, "stopped at") {
				t.Errorf("a listing of all %d keys says it stopped: %q", want, errs)
			}
			// A limit of exactly the blocked keys lists them all, and says
			// nothing is left.
			code, out, errs = cli(t, url, "blocked", "-rule", "name=otp,limit=1/1h,algorithm=fixed-window", "-prefix", prefix, "-limit", strconv.Itoa(want), "-o", "json")
			if got := parseListed(t, out); code != 0 || len(got) != want || strings.Contains(errs, "stopped at") {
				t.Errorf("blocked -limit %d = %d, %d keys, %q", want, code, len(got), errs)
			}
			code, out, errs = cli(t, url, "blocked", "-rule", "name=otp,limit=1/1h,algorithm=fixed-window", "-prefix", prefix, "-limit", "7")
			if lines := strings.Count(out, "\notp "); code != 0 || lines != 7 || !strings.Contains(out, "stopped at -limit 7") || strings.Contains(errs, "scanned on") {
				t.Fatalf("blocked -limit 7 = %d, %d keys %q %q", code, lines, out, errs)
			}
		})
	}
}

// TestBlockedByConfiguration lists the blocked keys of every limit of a
// domain of the service's configuration, each under its policy.
func TestBlockedByConfiguration(t *testing.T) {
	dir := t.TempDir()
	conf := `domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	other := "domain: rl.other\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	for name, text := range map[string]string{"rl.yaml": conf, "other.yaml": other} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + redistest.Addr(t)
	prefix := testPrefix(t)
	ctx := context.Background()
	l := newLimiter(t, url, prefix)
	take := func(domain string, e rlmatch.Entry, n int) string {
		m := (*rlmatch.Config)(cfg).Match(domain, []rlmatch.Entry{e})
		for range n {
			if d, err := l.Check(ctx, m.Hits(1)...); err != nil || !d.Allowed {
				t.Fatalf("%v: %+v, %v", e, d, err)
			}
		}
		return m.Key
	}
	carol := take("rl", rlmatch.Entry{Key: "user", Value: "carol"}, 2)
	take("rl", rlmatch.Entry{Key: "user", Value: "dave"}, 1)
	ip := take("rl", rlmatch.Entry{Key: "ip", Value: "192.0.2.7"}, 1)
	take("rl.other", rlmatch.Entry{Key: "user", Value: "erin"}, 1)

	code, out, errs := cli(t, url, "blocked", "-config", dir, "-domain", "rl", "-prefix", prefix, "-o", "json")
	got := parseListed(t, out)
	// Each key under the policy that the service reports (the limits
	// have no name: their descriptor paths).
	if _, c := got["rl.user "+keyenc.Encode(carol)]; code != 0 || len(got) != 2 || !c {
		t.Fatalf("blocked = %d %q %q; want %q under rl.user and %q under rl.ip", code, out, errs, carol, ip)
	}
	if _, i := got["rl.ip "+keyenc.Encode(ip)]; !i {
		t.Fatalf("blocked = %q; want %q under rl.ip", out, ip)
	}
}

// TestBlockedByLiveLimits lists the blocked keys of a library's live
// limits file, where one account has a limit of its own: each key is
// judged by its own limit, which one -rule cannot do.
func TestBlockedByLiveLimits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "limits.yaml")
	conf := `domain: bank
descriptors:
  - key: pix
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: pix
    value: acct-42
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: pix
    value: acct-7
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	live := rlconfig.NewRules("bank", func() *rlconfig.Config { return cfg })
	url := "redis://" + redistest.Addr(t)
	prefix := testPrefix(t)
	ctx := context.Background()
	l := newLimiter(t, url, prefix)
	for key, n := range map[string]int{"acct-1": 2, "acct-42": 3, "acct-7": 5, "acct 9": 2} {
		rule, ok := live.Override(floodgate.Rule{Name: "pix", Algorithm: floodgate.FixedWindow}, key)
		if !ok {
			t.Fatalf("no rule for %q", key)
		}
		for range n {
			if d, err := l.Allow(ctx, rule, key); err != nil || !d.Allowed {
				t.Fatalf("%q: %+v, %v", key, d, err)
			}
		}
	}
	code, out, errs := cli(t, url, "blocked", "-limits-file", file, "-domain", "bank", "-prefix", prefix, "-o", "json")
	got := parseListed(t, out)
	want := []string{"pix acct-1", "pix acct-7", "pix " + keyenc.Encode("acct 9")} // sorted: "~" is after the letters
	if keys := slices.Sorted(maps.Keys(got)); code != 0 || !slices.Equal(keys, want) || got["pix acct-7"].Rule != "pix: 5/1m0s fixed-window" {
		t.Fatalf("blocked -limits-file = %d %q %q; want %q, acct-7 under its own 5/1m", code, out, errs, want)
	}
	// A per-key override of the live limit's name (floodgate override set
	// -rule pix), which the services put over the file's limits
	// (floodgate.Overlay): acct-1, 2 of 2 under the file, is 2 of 10
	// under its override, and not blocked.
	table, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	if err := table.Set(ctx, overridetable.Entry{Rule: floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute, Algorithm: floodgate.FixedWindow}, Key: "acct-1"}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, url, "blocked", "-limits-file", file, "-domain", "bank", "-prefix", prefix, "-o", "json")
	if keys := slices.Sorted(maps.Keys(parseListed(t, out))); code != 0 || !slices.Equal(keys, want[1:]) {
		t.Fatalf("blocked -limits-file with acct-1 raised to 10/1m = %d %q %q; want %q: acct-1 judged by its override", code, out, errs, want[1:])
	}
	// The name's rule alone takes acct-42's 3 requests for a block.
	_, out, _ = cli(t, url, "blocked", "-rule", "name=pix,limit=2/1m,algorithm=fixed-window", "-prefix", prefix, "-o", "json")
	if _, ok := parseListed(t, out)["pix acct-42"]; !ok {
		t.Errorf("blocked -rule pix 2/1m does not list acct-42: %q", out)
	}
}

func TestBlockedBadInput(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rule := "name=a,limit=1/1m"
	for _, tc := range []struct {
		name string
		url  string
		args []string
		code int
		want string
	}{
		{"no rule", url, nil, 2, "-rule is required"},
		{"an argument", url, []string{"-rule", rule, "alice"}, 2, "takes no arguments"},
		{"bad rule", url, []string{"-rule", "name=a,limit=1/1m", "-rule", "name=b"}, 2, "name and limit are required"},
		{"rules sharing keys", url, []string{"-rule", "name=a,limit=1/1m", "-rule", "name=a,limit=2/1m"}, 2, "share their keys"},
		{"limit 0", url, []string{"-rule", rule, "-limit", "0"}, 2, "-limit 0"},
		{"bad output", url, []string{"-rule", rule, "-o", "yaml"}, 2, "want text or json"},
		{"bad timeout", url, []string{"-rule", rule, "-timeout", "0s"}, 2, "-timeout 0s: want a positive duration"},
		{"bad progress", url, []string{"-rule", rule, "-progress", "-1s"}, 2, "-progress -1s: want zero or more"},
		{"domain without config", url, []string{"-rule", rule, "-domain", "rl"}, 2, "-domain needs -config"},
		{"config and rule", url, []string{"-config", dir, "-domain", "rl", "-rule", rule}, 2, "-config and -limits-file take -domain"},
		{"config and limits file", url, []string{"-config", dir, "-limits-file", filepath.Join(dir, "rl.yaml"), "-domain", "rl"}, 2, "not both"},
		{"limits file without domain", url, []string{"-limits-file", filepath.Join(dir, "rl.yaml")}, 2, "take -domain"},
		{"missing limits file", url, []string{"-limits-file", filepath.Join(dir, "nope.yaml"), "-domain", "rl"}, 2, "nope.yaml"},
		{"unknown domain", url, []string{"-config", dir, "-domain", "nope"}, 2, `domain "nope" has no counted limit`},
		{"prefix with a brace", url, []string{"-rule", rule, "-prefix", "a{"}, 2, "brace"},
		{"no REDIS_URL", "", []string{"-rule", rule}, 2, "REDIS_URL is empty"},
		{"bad REDIS_URL", "http://x", []string{"-rule", rule}, 2, "invalid options"},
		{"Redis down", "redis://127.0.0.1:1", []string{"-timeout", "300ms", "-rule", rule}, 1, "store unavailable"},
	} {
		code, out, errs := cli(t, tc.url, append([]string{"blocked"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%s: exit %d, out %q, errors %q; want exit %d and an error saying %q", tc.name, code, out, errs, tc.code, tc.want)
		}
	}
}

// TestBlockedRedisStops fails with exit status 1 when Redis stops
// answering in the middle of a listing.
func TestBlockedRedisStops(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Cont()
	code, out, errs := cli(t, srv.URL(), "blocked", "-timeout", "300ms", "-rule", "name=a,limit=1/1m")
	if code != 1 || out != "" || !strings.Contains(errs, "store unavailable") {
		t.Fatalf("exit %d, %q, %q; want 1 and the store unavailable", code, out, errs)
	}
}
