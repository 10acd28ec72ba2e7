package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestRedisPasswordsAreNeverPrinted: whatever form the Redis credentials
// take (a URL, escaped or not; envoyproxy/ratelimit's HOST:PORT, with
// user:password@ or beside REDIS_AUTH) and whatever becomes of them
// (accepted and connected, refused, unparsable, a wrong password, no
// server), no piece of the password reaches the service's start-up
// output or any subcommand's output.
func TestRedisPasswordsAreNeverPrinted(t *testing.T) {
	// Every special character of a URL's userinfo, between runs that a
	// search can find escaped or not.
	const pw = "Zq7p@Wk9m/Xr4t?Yv2n#Ub8s%Tc6d:Se3f"
	pieces := []string{"Zq7p", "Wk9m", "Xr4t", "Yv2n", "Ub8s", "Tc6d", "Se3f"}
	srv := passwordRedis(t, pw)
	addr := srv.Addr()
	user := url.UserPassword("default", pw).String() // escaped
	dir := t.TempDir()
	conf := "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		ok   bool // the service starts on it, and the subcommands run
	}{
		{"URL", map[string]string{"REDIS_URL": "redis://" + user + "@" + addr}, true},
		{"URL, password only", map[string]string{"REDIS_URL": "redis://:" + strings.TrimPrefix(user, "default:") + "@" + addr}, true},
		{"URL, unescaped", map[string]string{"REDIS_URL": "redis://default:" + pw + "@" + addr}, false},
		{"URL, bad port", map[string]string{"REDIS_URL": "redis://" + user + "@127.0.0.1:99x"}, false},
		{"URL, REDIS_TLS beside it", map[string]string{"REDIS_URL": "redis://" + user + "@" + addr, "REDIS_TLS": "true"}, false},
		{"HOST:PORT with user:password", map[string]string{"REDIS_URL": "default:" + pw + "@" + addr}, true},
		{"HOST:PORT with :password", map[string]string{"REDIS_URL": ":" + pw + "@" + addr}, true},
		{"HOST:PORT with user:password, bad port", map[string]string{"REDIS_URL": "default:" + pw + "@127.0.0.1:99x"}, false},
		{"HOST:PORT with user:password and REDIS_AUTH", map[string]string{"REDIS_URL": "default:" + pw + "@" + addr, "REDIS_AUTH": pw}, false},
		{"HOST:PORT with REDIS_AUTH :password", map[string]string{"REDIS_URL": addr, "REDIS_AUTH": ":" + pw}, true},
		// A REDIS_AUTH with a colon is USER:PASSWORD, as upstream reads it.
		{"HOST:PORT with REDIS_AUTH, read as user:password", map[string]string{"REDIS_URL": addr, "REDIS_AUTH": pw}, false},
		{"HOST:PORT with REDIS_AUTH user:password", map[string]string{"REDIS_URL": addr, "REDIS_AUTH": "default:" + pw}, true},
		{"REDIS_AUTH, bad port", map[string]string{"REDIS_URL": "127.0.0.1:99x", "REDIS_AUTH": pw}, false},
		{"REDIS_AUTH beside a URL", map[string]string{"REDIS_URL": "redis://" + addr, "REDIS_AUTH": pw}, false},
		{"sentinel without a sentinel", map[string]string{"REDIS_URL": "default:" + pw + "@mymaster", "REDIS_TYPE": "sentinel"}, false},
		{"REDIS_SENTINEL_AUTH", map[string]string{"REDIS_URL": "mymaster," + addr, "REDIS_TYPE": "sentinel", "REDIS_SENTINEL_AUTH": pw}, false},
		{"a wrong password", map[string]string{"REDIS_URL": addr, "REDIS_AUTH": pw + "-old"}, false},
		{"a socket that is not there", map[string]string{"REDIS_URL": filepath.Join(dir, "redis.sock"), "REDIS_AUTH": pw}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaks := func(what, out string) {
				t.Helper()
				for _, p := range pieces {
					if strings.Contains(out, p) {
						t.Errorf("%s prints %q, a piece of the password:\n%s", what, p, out)
						return
					}
				}
			}
			// The service's start: it serves, then stops at once.
			vars := map[string]string{"CONFIG_DIR": dir, "GRPC_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0", "DECISION_TIMEOUT": "1s"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var logs syncbuf.Buffer
			served := false
			code := serve(ctx, nil, env(vars), &logs, serveHooks{ready: func(string, string, string) { served = true; cancel() }})
			leaks("serve", logs.String())
			if tc.ok && (code != 0 || !served) {
				t.Errorf("serve: exit %d, served %v; want it to serve:\n%s", code, served, logs.String())
			}
			if !tc.ok && code == 0 && !served {
				t.Errorf("serve: exit 0 without serving:\n%s", logs.String())
			}
			for _, args := range [][]string{
				{"peek", "-timeout", "1s", "-rule", "name=login,limit=5/10m", "alice"},
				{"reset", "-timeout", "1s", "-config", dir, "-domain", "rl", "user=carol"},
				{"blocked", "-timeout", "1s", "-rule", "name=login,limit=5/10m"},
				{"override", "ls", "-timeout", "1s"},
			} {
				code, out, errs := cliEnv(t, tc.vars, args...)
				leaks(strings.Join(args, " "), out+errs)
				if (code == 0) != tc.ok {
					t.Errorf("%v: exit %d %q %q; want success %v", args, code, out, errs, tc.ok)
				}
			}
		})
	}
}
