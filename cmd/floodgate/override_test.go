package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestOverride gives a customer a limit of its own from the shell, on a
// standalone Redis and on a Cluster, and checks that a service's Limiter
// (through an overrides.Table) admits exactly that limit, then the
// rule's own once the override is removed.
func TestOverride(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := "ovr" + strings.ReplaceAll(t.Name(), "/", "-") + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			// The service: redisstore and an overrides.Table on the same prefix.
			store, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			src, err := overrides.New(ctx, overrides.Options{URL: url, Prefix: prefix, Refresh: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			key := prefix + "{overrides}"
			l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second, Overrides: src})
			if err != nil {
				t.Fatal(err)
			}
			api := floodgate.Rule{Name: "api", Limit: 2, Window: time.Minute}
			admitted := func(key string) int {
				t.Helper()
				if err := src.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				for n := range 20 {
					d, err := l.Allow(ctx, api, key)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						return n
					}
				}
				return 20
			}

			code, out, errs := cli(t, url, "override", "set", "-prefix", prefix, "-rule", "api", "-limit", "5/1m", "customer-42")
			if code != 0 || !strings.Contains(out, `set api: 5/1m0s sliding-window for key "customer-42", no expiry`) {
				t.Fatalf("set = %d %q %q", code, out, errs)
			}
			if n := admitted("customer-42"); n != 5 {
				t.Fatalf("customer-42 admitted %d after set; want 5", n)
			}
			if n := admitted("customer-41"); n != 2 {
				t.Fatalf("customer-41 admitted %d; want the rule's 2", n)
			}
			code, out, errs = cli(t, url, "override", "set", "-prefix", prefix, "-rule", "api", "-limit", "30/1s",
				"-algorithm", "token-bucket", "-burst", "60", "-ttl", "24h", "-o", "json", "{odd}\nkey")
			var got map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("set -o json = %d %q %q", code, out, errs)
			}
			s := got["set"].(map[string]any)
			exp, err := time.Parse(time.RFC3339Nano, s["expires"].(string))
			if err != nil || s["limit"] != 30.0 || s["burst"] != 60.0 || s["algorithm"] != "token-bucket" || s["window_ms"] != 1000.0 ||
				s["key"] != "{odd}\nkey" || time.Until(exp) < 23*time.Hour || time.Until(exp) > 24*time.Hour {
				t.Fatalf("set -o json = %v; want 30/1s token-bucket burst 60, expiring in 24h", got)
			}

			code, out, _ = cli(t, url, "override", "get", "-prefix", prefix, "-rule", "api", "-o", "json", "customer-42")
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["found"] != true || got["limit"] != 5.0 || got["window"] != "1m0s" || got["expires"] != nil {
				t.Fatalf("get -o json = %d %q; want found, 5/1m0s, no expiry", code, out)
			}
			code, out, _ = cli(t, url, "override", "get", "-prefix", prefix, "-rule", "web", "customer-42")
			if code != 0 || !strings.Contains(out, `no override of key "customer-42" under rule web`) {
				t.Fatalf("get of another rule = %d %q", code, out)
			}

			// ls shows an override without expiry as "never", and what the
			// services skip.
			if _, err := redistest.Command(holder(t, cluster, name, url, key), "HSET", key, "api:junk", "lots"); err != nil {
				t.Fatal(err)
			}
			code, out, _ = cli(t, url, "override", "ls", "-prefix", prefix)
			lines := strings.Split(out, "\n")
			if code != 0 || len(lines) != 7 ||
				strings.Join(strings.Fields(lines[0]), " ") != "RULE KEY LIMIT ALGORITHM EXPIRES" ||
				strings.Join(strings.Fields(lines[1]), " ") != `api "customer-42" 5/1m0s sliding-window never` ||
				!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), `api "{odd}\nkey" 30/1s token-bucket, burst 60 `+exp.UTC().Format(time.RFC3339)+" (in 2") ||
				lines[3] != "2 override(s)" ||
				!strings.HasPrefix(lines[4], "1 invalid entr(ies)") || !strings.Contains(lines[5], `"api:junk" = "lots"`) {
				t.Fatalf("ls = %d\n%s", code, out)
			}
			code, out, _ = cli(t, url, "override", "ls", "-prefix", prefix, "-rule", "web", "-o", "json")
			if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"invalid":true`) {
				t.Fatalf("ls -rule web -o json = %d %q; want only the invalid entry", code, out)
			}

			code, out, _ = cli(t, url, "override", "rm", "-prefix", prefix, "-rule", "api", "-o", "json", "customer-42")
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["removed"] != true {
				t.Fatalf("rm = %d %q", code, out)
			}
			code, out, _ = cli(t, url, "override", "rm", "-prefix", prefix, "-rule", "api", "customer-42")
			if code != 0 || !strings.Contains(out, "no override") {
				t.Fatalf("rm again = %d %q", code, out)
			}
			// Back on the rule's 2, with the 5 recorded: denied.
			if n := admitted("customer-42"); n != 0 {
				t.Fatalf("customer-42 admitted %d after rm; want 0 (5 taken, the rule allows 2)", n)
			}
		})
	}
}

// holder is the address of the server that holds key.
func holder(t *testing.T, c *redistest.Cluster, name, url, key string) string {
	t.Helper()
	if name != "cluster" {
		return strings.TrimPrefix(url, "redis://")
	}
	slot, err := c.KeySlot(key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	return n.Addr()
}

// An expired override is listed as such, and set deletes it.
func TestOverrideExpired(t *testing.T) {
	ctx := context.Background()
	url := "redis://" + redistest.Addr(t)
	prefix := "ovrexp" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	table, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	old := overridetable.Entry{Rule: floodgate.Rule{Name: "api", Limit: 9, Window: time.Minute}, Key: "old", Expires: time.Now().Add(-time.Minute)}
	if err := table.Set(ctx, old); err != nil {
		t.Fatal(err)
	}
	code, out, _ := cli(t, url, "override", "ls", "-prefix", prefix)
	if code != 0 || !strings.Contains(out, `"old"`) || !strings.Contains(out, "expired "+old.Expires.UTC().Format(time.RFC3339)) {
		t.Fatalf("ls = %d %q; want old, expired", code, out)
	}
	code, out, _ = cli(t, url, "override", "get", "-prefix", prefix, "-rule", "api", "old")
	if code != 0 || !strings.Contains(out, "(expired: the rule's own limit applies)") {
		t.Fatalf("get = %d %q", code, out)
	}
	code, out, _ = cli(t, url, "override", "set", "-prefix", prefix, "-rule", "api", "-limit", "3/1s", "new")
	if code != 0 || !strings.Contains(out, "deleted 1 expired override(s)") {
		t.Fatalf("set = %d %q; want the expired one deleted", code, out)
	}
	if _, ok, err := table.Get(ctx, "api", "old"); err != nil || ok {
		t.Fatalf("old after set: %v, %v; want gone", ok, err)
	}
}

// Bad input exits 2 with a reason, before Redis is asked; an unreachable
// Redis exits 1.
func TestOverrideErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "redis://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name string
		url  string
		args []string
		code int
		want string
	}{
		{"no subcommand", dead, []string{"override"}, 2, "override needs set, get, rm or ls"},
		{"unknown subcommand", dead, []string{"override", "add"}, 2, `unknown override subcommand "add"`},
		{"no rule", dead, []string{"override", "get", "k"}, 2, "-rule is required"},
		{"bad rule name", dead, []string{"override", "get", "-rule", "a b", "k"}, 2, "name has"},
		{"no key", dead, []string{"override", "rm", "-rule", "api"}, 2, "want one KEY, got 0"},
		{"two keys", dead, []string{"override", "get", "-rule", "api", "a", "b"}, 2, "want one KEY, got 2"},
		{"ls with a key", dead, []string{"override", "ls", "k"}, 2, "takes no KEY"},
		{"no limit", dead, []string{"override", "set", "-rule", "api", "k"}, 2, "needs -limit"},
		{"bad limit", dead, []string{"override", "set", "-rule", "api", "-limit", "many/1m", "k"}, 2, "not a whole number"},
		{"bad algorithm", dead, []string{"override", "set", "-rule", "api", "-limit", "5/1m", "-algorithm", "leaky", "k"}, 2, "leaky"},
		{"burst on a window", dead, []string{"override", "set", "-rule", "api", "-limit", "5/1m", "-burst", "9", "k"}, 2, "burst is only meaningful"},
		{"negative ttl", dead, []string{"override", "set", "-rule", "api", "-limit", "5/1m", "-ttl", "-1h", "k"}, 2, "negative"},
		{"limit on get", dead, []string{"override", "get", "-rule", "api", "-limit", "5/1m", "k"}, 2, "-limit is only for override set"},
		{"bad output", dead, []string{"override", "ls", "-o", "yaml"}, 2, `-o "yaml"`},
		{"negative timeout", dead, []string{"override", "ls", "-timeout", "-1s"}, 2, "-timeout -1s: want a positive duration"},
		{"bad prefix", dead, []string{"override", "ls", "-prefix", "a{"}, 2, "brace"},
		{"-config and -rule", dead, []string{"override", "get", "-config", "x", "-domain", "d", "-rule", "api", "k=v"}, 2, "not -rule"},
		{"ls -config without -domain", dead, []string{"override", "ls", "-config", "x"}, 2, "override ls -config takes -domain"},
		{"ls -domain without a configuration", dead, []string{"override", "ls", "-domain", "d"}, 2, "-domain needs -config"},
		{"ls -config that does not load", dead, []string{"override", "ls", "-config", "/nonexistent", "-domain", "d"}, 2, "nonexistent"},
		{"-config that does not load", dead, []string{"override", "get", "-config", "/nonexistent", "-domain", "d", "k=v"}, 2, "nonexistent"},
		{"no REDIS_URL", "", []string{"override", "ls"}, 2, "REDIS_URL is empty"},
		{"Redis down", dead, []string{"override", "ls", "-timeout", "1s"}, 1, "store unavailable"},
		{"Redis down on set", dead, []string{"override", "set", "-rule", "api", "-limit", "5/1m", "-timeout", "1s", "k"}, 1, "store unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := cli(t, tc.url, tc.args...)
			if code != tc.code || out != "" || !strings.Contains(errs, tc.want) {
				t.Fatalf("%v = %d %q %q; want %d and %q", tc.args, code, out, errs, tc.code, tc.want)
			}
		})
	}
}

// peek and reset take a key's override into account, as the services
// do: given the base rule, they read and clear the state of the rule in
// force, and say so on stderr.
func TestPeekAndResetFollowOverrides(t *testing.T) {
	ctx := context.Background()
	url := "redis://" + redistest.Addr(t)
	prefix := "ovrpeek" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	table, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	// Another window: the override's state is another key than the base
	// rule's.
	vip := floodgate.Rule{Name: "api", Limit: 3, Window: 2 * time.Minute}
	if err := table.Set(ctx, overridetable.Entry{Rule: vip, Key: "vip"}); err != nil {
		t.Fatal(err)
	}
	store, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d, err := l.Allow(ctx, vip, "vip"); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	base := "name=api,limit=10/1m"
	code, out, errs := cli(t, url, "peek", "-rule", base, "-prefix", prefix, "-o", "json", "vip")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["allowed"] != false || got["rule"] != vip.String() ||
		!strings.Contains(errs, `key "vip" has an override under rule api: api: 3/2m0s sliding-window`) {
		t.Fatalf("peek = %d %q %q; want denied under the override 3/2m, noted on stderr", code, out, errs)
	}
	code, out, errs = cli(t, url, "reset", "-rule", base, "-prefix", prefix, "vip")
	if code != 0 || !strings.Contains(out, "reset api: 3/2m0s") {
		t.Fatalf("reset = %d %q %q", code, out, errs)
	}
	if d, err := l.Allow(ctx, vip, "vip"); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after reset: %+v, %v; want the override's state cleared, 2 left", d, err)
	}
	// A key without an override: the base rule, no note.
	code, out, errs = cli(t, url, "peek", "-rule", base, "-prefix", prefix, "plain")
	if code != 0 || !strings.Contains(out, "api: 10/1m0s sliding-window, key \"plain\"") || errs != "" {
		t.Fatalf("peek of a plain key = %d %q %q", code, out, errs)
	}
}

// The service applies the overrides of its Redis: a descriptor's key set
// with floodgate override gets its own limit from the service, within
// its refresh, and its /metrics counts them.
func TestServeAppliesOverrides(t *testing.T) {
	redis := redistest.Start(t)
	dir := t.TempDir()
	conf := "domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rule and key the service decides user=vip by, as peek -config
	// shows them.
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hits := (*rlmatch.Config)(cfg).Match("svc", []rlmatch.Entry{{Key: "user", Value: "vip"}}).Hits(1)
	if len(hits) != 1 {
		t.Fatalf("%d hits for user=vip; want 1", len(hits))
	}
	// By the descriptor, as the service's configuration names it: the
	// override takes the limit's rule name, key and algorithm.
	code, out, errs := cli(t, redis.URL(), "override", "set", "-config", dir, "-domain", "svc", "-limit", "4/1h", "user=vip")
	if code != 0 {
		t.Fatalf("override set -config = %d %q %q", code, out, errs)
	}
	code, out, errs = cli(t, redis.URL(), "override", "get", "-rule", hits[0].Rule.Name, "-o", "json", hits[0].Key)
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["found"] != true || got["limit"] != 4.0 || got["algorithm"] != hits[0].Rule.Algorithm.String() {
		t.Fatalf("get of %s %q = %d %q %q; want the override, 4 with the limit's algorithm %v", hits[0].Rule.Name, hits[0].Key, code, out, errs, hits[0].Rule.Algorithm)
	}
	code, _, errs = cli(t, redis.URL(), "override", "get", "-config", dir, "-domain", "svc", "team=x")
	if code != 2 || !strings.Contains(errs, `no counted limit of domain "svc" applies`) {
		t.Errorf("get -config of a descriptor that no limit matches = %d %q; want 2", code, errs)
	}
	r := startServe(t, map[string]string{"REDIS_URL": redis.Addr(), "CONFIG_DIR": dir, "DEBUG_ADDR": "127.0.0.1:0", "DECISION_TIMEOUT": "2s"})
	c := r.client(t)
	admitted := func(user string) int {
		t.Helper()
		n := 0
		for range 6 {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: []*commonv3.RateLimitDescriptor{{
				Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				n++
			}
		}
		return n
	}
	if n := admitted("vip"); n != 4 {
		t.Errorf("user=vip admitted %d of 6; want the override's 4", n)
	}
	if n := admitted("plain"); n != 2 {
		t.Errorf("user=plain admitted %d of 6; want the configuration's 2", n)
	}
	res, err := http.Get("http://" + r.debug + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `floodgate_overrides{table="fg:{overrides}"} 1`) {
		t.Errorf("/metrics lacks floodgate_overrides 1")
	}
}
