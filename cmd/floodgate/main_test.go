package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

func TestMain(m *testing.M) {
	if os.Getenv(fdLimitedChild) != "" {
		os.Exit(serveUnderFDLimit()) // TestServeConnectionBounds's service
	}
	redistest.Main(m)
}

// cli runs the command with REDIS_URL url and returns its status, output
// and errors.
func cli(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(context.Background(), args, func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return ""
	}, &out, &errs)
	return code, out.String(), errs.String()
}

// TestPeekAndReset unlocks a locked-out key, plain and hashed, on a
// standalone Redis and on a Cluster, as an on-call engineer would.
func TestPeekAndReset(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := "cli" + strings.ReplaceAll(t.Name(), "/", "-") + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			store, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rule := floodgate.Rule{Name: "login", Limit: 5, Window: 10 * time.Minute}
			spec := "name=login,limit=5/10m"
			for _, key := range []string{"alice@example.com", "{braces} and\nnewline"} {
				for range 5 {
					if d, err := l.Allow(ctx, rule, key); err != nil || !d.Allowed {
						t.Fatalf("%q: %+v, %v", key, d, err)
					}
				}
				code, out, errs := cli(t, url, "peek", "-rule", spec, "-prefix", prefix, "-o", "json", key)
				var got map[string]any
				if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["allowed"] != false || got["remaining"] != 0.0 || got["retry_after_ms"].(float64) <= 0 || got["key"] != key {
					t.Fatalf("%q: peek = %d %q %q; want denied, 0 left, a wait", key, code, out, errs)
				}
				code, out, errs = cli(t, url, "reset", "-rule", spec, "-prefix", prefix, key)
				if code != 0 || !strings.Contains(out, "its count is forgotten") {
					t.Fatalf("%q: reset = %d %q %q", key, code, out, errs)
				}
				if d, err := l.Allow(ctx, rule, key); err != nil || !d.Allowed || d.Remaining != 4 {
					t.Fatalf("%q after reset: %+v, %v; want allowed with 4 left", key, d, err)
				}
				code, out, _ = cli(t, url, "peek", "-rule", spec, "-prefix", prefix, key)
				if code != 0 || !strings.Contains(out, "would be allowed; 3 left after it") {
					t.Fatalf("%q: text peek = %d %q", key, code, out)
				}
			}
		})
	}
}

func TestBadInputAndUnreachableRedis(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	for _, tc := range []struct {
		name string
		url  string
		args []string
		code int
		want string
	}{
		{"no subcommand: the service, without CONFIG_DIR", url, nil, 2, "CONFIG_DIR: is required"},
		{"unknown subcommand", url, []string{"unlock"}, 2, `unknown subcommand "unlock"`},
		{"no rule", url, []string{"peek", "k"}, 2, "-rule is required"},
		{"no key", url, []string{"peek", "-rule", "name=a,limit=1/1m"}, 2, "want one KEY"},
		{"bad limit", url, []string{"peek", "-rule", "name=a,limit=ten/1m", "k"}, 2, `count "ten"`},
		{"bad field", url, []string{"peek", "-rule", "name=a,limit=1/1m,colour=red", "k"}, 2, `unknown field "colour"`},
		{"bad algorithm", url, []string{"reset", "-rule", "name=a,limit=1/1m,algorithm=leaky", "k"}, 2, "unknown algorithm"},
		{"burst on a log", url, []string{"reset", "-rule", "name=a,limit=1/1m,burst=5", "k"}, 2, "burst"},
		{"bad output", url, []string{"peek", "-rule", "name=a,limit=1/1m", "-o", "yaml", "k"}, 2, "want text or json"},
		{"zero timeout", url, []string{"peek", "-rule", "name=a,limit=1/1m", "-timeout", "0s", "k"}, 2, "-timeout 0s: want a positive duration"},
		{"no REDIS_URL", "", []string{"peek", "-rule", "name=a,limit=1/1m", "k"}, 2, "REDIS_URL is empty"},
		{"bad REDIS_URL", "http://x", []string{"peek", "-rule", "name=a,limit=1/1m", "k"}, 2, "invalid options"},
		{"Redis down", "redis://127.0.0.1:1", []string{"peek", "-timeout", "300ms", "-rule", "name=a,limit=1/1m", "k"}, 1, "store unavailable"},
	} {
		code, out, errs := cli(t, tc.url, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%s: exit %d, out %q, errors %q; want exit %d and an error saying %q", tc.name, code, out, errs, tc.code, tc.want)
		}
	}
}

// TestByConfiguration finds the limits of a descriptor in the service's
// configuration, as the service would, and unlocks them.
func TestByConfiguration(t *testing.T) {
	dir := t.TempDir()
	conf := "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n"
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + redistest.Addr(t)
	prefix := "cliconf" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	ctx := context.Background()
	store, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hits := (*rlmatch.Config)(cfg).Match("rl", []rlmatch.Entry{{Key: "user", Value: "carol"}}).Hits(1)
	for range 2 {
		if d, err := l.Check(ctx, hits...); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	code, out, errs := cli(t, url, "peek", "-config", dir, "-domain", "rl", "-prefix", prefix, "user=carol")
	if code != 0 || !strings.Contains(out, "would be denied") {
		t.Fatalf("peek = %d %q %q; want carol denied", code, out, errs)
	}
	if code, out, errs := cli(t, url, "reset", "-config", dir, "-domain", "rl", "-prefix", prefix, "user=carol"); code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("reset = %d %q %q", code, out, errs)
	}
	if d, err := l.Check(ctx, hits...); err != nil || !d.Allowed {
		t.Fatalf("after reset: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"peek", "-config", dir, "-domain", "rl", "nobody=x"}, "no counted limit"},
		{[]string{"peek", "-config", dir, "-domain", "rl", "user"}, "is not KEY=VALUE"},
		{[]string{"peek", "-config", dir, "user=x"}, "-config takes -domain"},
		{[]string{"peek", "-domain", "rl", "-rule", "name=a,limit=1/1m", "k"}, "-domain needs -config"},
		{[]string{"peek", "-config", filepath.Join(dir, "missing"), "-domain", "rl", "user=x"}, "missing"},
	} {
		if code, _, errs := cli(t, url, tc.args...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
