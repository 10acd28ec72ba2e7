package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// cliEnv runs the command in the environment vars and returns its status,
// output and errors.
func cliEnv(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(context.Background(), args, env(vars), &out, &errs)
	return code, out.String(), errs.String()
}

// passwordRedis starts a dedicated redis-server whose default user needs
// password.
func passwordRedis(t *testing.T, password string) *redistest.Server {
	t.Helper()
	srv := redistest.Start(t)
	if _, err := redistest.Command(srv.Addr(), "CONFIG", "SET", "requirepass", password); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestSubcommandsReadTheServicesEnvironment: run beside the service (in
// its container, with its environment), the subcommands find the Redis,
// the key prefix and the configuration the service finds: REDIS_URL in
// envoyproxy/ratelimit's HOST:PORT form with REDIS_AUTH, CACHE_KEY_PREFIX,
// RUNTIME_ROOT. What the service refuses, they refuse too.
func TestSubcommandsReadTheServicesEnvironment(t *testing.T) {
	srv := passwordRedis(t, "s3cret")
	root := t.TempDir()
	dir := filepath.Join(root, "current", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t)
	l := newLimiter(t, "redis://:s3cret@"+srv.Addr(), prefix)
	hits := (*rlmatch.Config)(cfg).Match("rl", []rlmatch.Entry{{Key: "user", Value: "carol"}}).Hits(1)
	if d, err := l.Check(context.Background(), hits...); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	vars := map[string]string{
		"REDIS_URL": srv.Addr(), "REDIS_AUTH": "s3cret", "CACHE_KEY_PREFIX": prefix,
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "current",
	}
	code, out, errs := cliEnv(t, vars, "peek", "-domain", "rl", "-o", "json", "user=carol")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["allowed"] != false {
		t.Errorf("peek -domain rl user=carol in the service's environment = %d %q %q; want carol denied", code, out, errs)
	}
	code, out, errs = cliEnv(t, vars, "blocked", "-domain", "rl", "-o", "json")
	if listed := parseListed(t, out); code != 0 || len(listed) != 1 {
		t.Errorf("blocked -domain rl in the service's environment = %d %q %q; want carol listed", code, out, errs)
	}
	code, out, errs = cliEnv(t, vars, "override", "set", "-domain", "rl", "-limit", "5/1h", "-o", "json", "user=carol")
	if code != 0 || !strings.Contains(out, `"set"`) {
		t.Errorf("override set -domain rl in the service's environment = %d %q %q", code, out, errs)
	}
	code, out, errs = cliEnv(t, vars, "reset", "-rule", "name=x,limit=1/1m", "-o", "json", "k")
	if code != 0 || !strings.Contains(out, `"reset":true`) {
		t.Errorf("reset with REDIS_URL HOST:PORT and REDIS_AUTH = %d %q %q", code, out, errs)
	}
	// A plain HOST:PORT, as the service takes it.
	rule := floodgate.Rule{Name: "login", Limit: 1, Window: time.Hour}
	plain := testPrefix(t)
	if d, err := newLimiter(t, "redis://"+redistest.Addr(t), plain).Allow(context.Background(), rule, "alice"); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	code, out, errs = cliEnv(t, map[string]string{"REDIS_URL": redistest.Addr(t), "CACHE_KEY_PREFIX": plain}, "peek", "-rule", "name=login,limit=1/1h", "alice")
	if code != 0 || !strings.Contains(out, "would be denied") {
		t.Errorf("peek with REDIS_URL=%s = %d %q %q; want alice denied", redistest.Addr(t), code, out, errs)
	}
	// What the service refuses.
	for _, bad := range []map[string]string{
		{"REDIS_URL": srv.Addr(), "REDIS_TLS": "perhaps"},
		{"REDIS_URL": srv.Addr(), "REDIS_TYPE": "ring"},
		{"REDIS_URL": "redis://" + srv.Addr(), "REDIS_AUTH": "s3cret"},
		{"REDIS_URL": srv.Addr(), "REDIS_TLS_CACERT": "/ca.pem"},
		{"REDIS_URL": srv.Addr(), "CACHE_KEY_PREFIX": "{x}"},
	} {
		var serveErrs bytes.Buffer
		bad["CONFIG_DIR"] = dir
		if code := serve(context.Background(), nil, env(bad), &serveErrs, serveHooks{}); code != 2 {
			t.Fatalf("serve with %v: exit %d, want 2", bad, code)
		}
		for _, args := range [][]string{{"peek", "-rule", "name=x,limit=1/1m", "k"}, {"blocked", "-rule", "name=x,limit=1/1m"}, {"override", "ls"}} {
			if code, out, errs := cliEnv(t, bad, args...); code != 2 || out != "" {
				t.Errorf("%v with %v: exit %d %q %q; want 2, as serve refuses it: %s", args, bad, code, out, errs, serveErrs.String())
			}
		}
	}
}
