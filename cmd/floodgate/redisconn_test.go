package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/internal/testcerts"
)

// tlsRedis starts, for t, a redis-server that speaks TLS only (--port 0)
// with the certificate and key given and the CA file's certificates
// trusted for clients, requiring a client certificate when authClients,
// and returns its address. t's cleanup kills it.
func tlsRedis(t *testing.T, cert, key, ca string, authClients bool) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	auth := "no"
	if authClients {
		auth = "yes"
	}
	var out syncbuf.Buffer
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", auth,
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--logfile", "")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not listen: %v; %s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisTLSSettings: envoyproxy/ratelimit's Redis TLS settings
// (REDIS_TLS with REDIS_TLS_CLIENT_CERT, _KEY, REDIS_TLS_CACERT,
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION) against a redis-server that
// speaks TLS only: the subcommands and the service read them alike, so
// floodgate peek (one Redis call, its error printed) tells whether the
// connection is made, and why not.
func TestRedisTLSSettings(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "redis-ca")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", ca.PEM())
	srvCert, srvKey := ca.Issue(t, "redis", "127.0.0.1")
	otherCert, otherKey := ca.Issue(t, "redis", "redis.other.example") // a name that is not the address dialed
	cliCert, cliKey := ca.Issue(t, "floodgate")
	cert, key := write("client.crt", cliCert), write("client.key", cliKey)
	wrongCA := write("wrong-ca.crt", testcerts.NewCA(t, "another-ca").PEM())

	strict := tlsRedis(t, write("srv.crt", srvCert), write("srv.key", srvKey), caFile, true)
	misnamed := tlsRedis(t, write("other.crt", otherCert), write("other.key", otherKey), caFile, false)

	peek := []string{"peek", "-timeout", "3s", "-rule", "name=login,limit=5/10m", "alice"}
	for _, tc := range []struct {
		name string
		vars map[string]string
		code int
		want string // in the output when it succeeds, in the errors when not
	}{
		{"a client certificate", map[string]string{"REDIS_URL": strict, "REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile,
			"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key}, 0, "allowed; 4 left after it"},
		{"no client certificate where the server requires one", map[string]string{"REDIS_URL": strict, "REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile}, 1, "store unavailable"},
		{"the system's roots only", map[string]string{"REDIS_URL": strict, "REDIS_TLS": "true",
			"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key}, 1, "certificate signed by unknown authority"},
		{"the wrong CA", map[string]string{"REDIS_URL": strict, "REDIS_TLS": "true", "REDIS_TLS_CACERT": wrongCA,
			"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key}, 1, "certificate signed by unknown authority"},
		{"a URL with TLS and the files", map[string]string{"REDIS_URL": "rediss://" + strict, "REDIS_TLS_CACERT": caFile,
			"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key}, 0, "allowed; 4 left after it"},
		{"a certificate for another name", map[string]string{"REDIS_URL": misnamed, "REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile},
			1, "cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"},
		{"a certificate for another name, the host name not verified", map[string]string{"REDIS_URL": misnamed, "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": caFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, 0, "allowed; 4 left after it"},
		{"the host name not verified, the chain still is", map[string]string{"REDIS_URL": misnamed, "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": wrongCA, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, 1, "certificate signed by unknown authority"},
		{"the host name not verified, false", map[string]string{"REDIS_URL": misnamed, "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": caFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "false"}, 1, "cannot validate certificate for 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := cliEnv(t, tc.vars, peek...)
			got := out
			if tc.code != 0 {
				got = errs
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("exit %d, out %q, errors %q; want exit %d saying %q", code, out, errs, tc.code, tc.want)
			}
		})
	}

	// The service on the same settings keeps its limits in that Redis.
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "rl.yaml"), []byte("domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"CONFIG_DIR": conf, "REDIS_URL": strict, "REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile,
		"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key, "CACHE_KEY_PREFIX": "tls:"}
	r := startServe(t, vars)
	client := r.client(t)
	for i, want := range []string{"OK", "OVER_LIMIT"} {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}},
		}}})
		if err != nil || resp.GetOverallCode().String() != want {
			t.Fatalf("call %d: %v, %v; want %s:\n%s", i, resp, err, want, r.logs.String())
		}
	}
	u, err := redisURL(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := redisopt.FromURL(u, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern("tls:*").Build()).AsStrSlice()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys in the TLS Redis: %q, %v; want the service's", keys, err)
	}
}

// TestRedisSentinelAuth: REDIS_SENTINEL_AUTH is the sentinels' password,
// apart from REDIS_AUTH, the master's, as envoyproxy/ratelimit reads
// them. Sentinels that require one are asked with it, and without it the
// error says why.
func TestRedisSentinelAuth(t *testing.T) {
	s := redistest.StartSentinel(t, 0)
	for _, sn := range s.SentinelAddrs() {
		// The sentinels keep watching the master once it needs a password.
		if _, err := redistest.Command(sn, "SENTINEL", "SET", redistest.SentinelMasterName, "auth-pass", "master-pw"); err != nil {
			t.Fatal(err)
		}
	}
	master, err := s.Master()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Command(master.Addr(), "CONFIG", "SET", "requirepass", "master-pw"); err != nil {
		t.Fatal(err)
	}
	for _, sn := range s.SentinelAddrs() {
		if _, err := redistest.Command(sn, "ACL", "SETUSER", "default", "resetpass", ">sentinel-pw"); err != nil {
			t.Fatal(err)
		}
	}
	url := redistest.SentinelMasterName + "," + strings.Join(s.SentinelAddrs(), ",")
	peek := []string{"peek", "-timeout", "3s", "-rule", "name=login,limit=5/10m", "alice"}
	for _, tc := range []struct {
		name string
		vars map[string]string
		code int
		want string
	}{
		{"both passwords", map[string]string{"REDIS_SENTINEL_AUTH": "sentinel-pw", "REDIS_AUTH": "master-pw"}, 0, "allowed; 4 left after it"},
		{"the sentinels' as user:password", map[string]string{"REDIS_SENTINEL_AUTH": "default:sentinel-pw", "REDIS_AUTH": "master-pw"}, 0, "allowed; 4 left after it"},
		{"without the sentinels' password", map[string]string{"REDIS_AUTH": "master-pw"}, 1, "NOAUTH"},
		{"a wrong sentinels' password", map[string]string{"REDIS_SENTINEL_AUTH": "old-pw", "REDIS_AUTH": "master-pw"}, 1, "WRONGPASS"},
		{"the master's password for the sentinels", map[string]string{"REDIS_SENTINEL_AUTH": "master-pw"}, 1, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.vars["REDIS_URL"], tc.vars["REDIS_TYPE"] = url, "sentinel"
			code, out, errs := cliEnv(t, tc.vars, peek...)
			got := out
			if tc.code != 0 {
				got = errs
			}
			if code != tc.code || !strings.Contains(got, tc.want) || strings.Contains(out+errs, "sentinel-pw") {
				t.Errorf("exit %d, out %q, errors %q; want exit %d saying %q, never the password", code, out, errs, tc.code, tc.want)
			}
		})
	}
}
