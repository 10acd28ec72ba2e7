package redisopt_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
)

func TestFromURL(t *testing.T) {
	cases := []struct {
		url  string
		dial time.Duration
		want time.Duration
	}{
		{"redis://127.0.0.1:6379", 0, time.Second},
		{"redis://127.0.0.1:6379", 3 * time.Second, 3 * time.Second},
		{"redis://127.0.0.1:6379?dial_timeout=2s", 0, 2 * time.Second},
		{"redis://127.0.0.1:6379?dial_timeout=2s", 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range cases {
		opt, err := redisopt.FromURL(tc.url, tc.dial, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if !opt.DisableCache || opt.Dialer.Timeout != tc.want {
			t.Errorf("%s, dial %v: cache off %v, dial timeout %v; want cache off, %v", tc.url, tc.dial, opt.DisableCache, opt.Dialer.Timeout, tc.want)
		}
	}
	if _, err := redisopt.FromURL("ftp://x", 0, time.Second); err == nil {
		t.Error("ftp://x parsed")
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ msg, url, want string }{
		{`parse "redis://:hunter2@h:9x": invalid port`, "redis://:hunter2@h:9x", `parse "redis://:xxxxx@h:9x": invalid port`},
		{`bad "rediss://u:hun%2Fter@[::1" and hun/ter`, "rediss://u:hun%2Fter@[::1", `bad "rediss://u:xxxxx@[::1" and xxxxx`},
		{`no password in "redis://u@h"`, "redis://u@h", `no password in "redis://u@h"`},
		{`not a URL: h:6379`, "h:6379", `not a URL: h:6379`},
		{`p@ss in "redis://:p@ss@h"`, "redis://:p@ss@h", `xxxxx in "redis://:xxxxx@h"`},
		{`parse "redis://:se\x01cret@h"`, "redis://:se\x01cret@h", `parse "redis://:xxxxx@h"`},
		{`parse "u:hun/ter2@h:9x"`, "u:hun/ter2@h:9x", `parse "u:xxxxx@h:9x"`},
		{`got "hun@ter2@mymaster"`, "hun@ter2@mymaster", `got "xxxxx@mymaster"`},
		{`parse "redis://s:1?master_set=m&sentinel_password=p%40ss" p@ss`, "redis://s:1?master_set=m&sentinel_password=p%40ss",
			`parse "redis://s:1?master_set=m&sentinel_password=xxxxx" xxxxx`},
		{`parse "redis://:pw1@s:9x?sentinel_password=pw2"`, "redis://:pw1@s:9x?sentinel_password=pw2", `parse "redis://:xxxxx@s:9x?sentinel_password=xxxxx"`},
	} {
		if got := redisopt.Redact(tc.msg, tc.url); got != tc.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tc.msg, tc.url, got, tc.want)
		}
	}
}

// TestFromURLErrorsHidePasswords: a URL that does not parse is reported
// without any piece of its password, even where the parser quotes a piece
// of it on its own (a password with an unescaped / ? # or %, which the
// parser reads as a port, a fragment or an escape) or escaped (a control
// character, which %q writes as \x01).
func TestFromURLErrorsHidePasswords(t *testing.T) {
	for _, tc := range []struct {
		url    string
		pieces []string // of the password: none may be printed
		keep   string   // what the message still names
	}{
		{"redis://:zq/wk@host:6379", []string{"zq", "wk"}, "host:6379"},
		{"redis://u:zq?wk@host:6379", []string{"zq", "wk"}, "host:6379"},
		{"redis://u:zq#wk@host:6379/0", []string{"zq", "wk"}, "host:6379"},
		{"redis://u:zq%wk@host:6379", []string{"zq", "%wk", "wk"}, "host:6379"},
		{"redis://u:zq\x01wk@host:6379", []string{"zq", "wk"}, "host:6379"},
		{"redis://u:zqwk@ho st:6379/0?master_set=a@b", []string{"zq", "wk"}, "xxxxx"},
		{"redis://:hunter2@host:99x", []string{"hunter2"}, "host:99x"},
	} {
		_, err := redisopt.FromURL(tc.url, 0, time.Second)
		if err == nil {
			t.Errorf("%q parsed", tc.url)
			continue
		}
		msg := err.Error()
		for _, p := range tc.pieces {
			if strings.Contains(msg, p) {
				t.Errorf("FromURL(%q): %q prints %q, a piece of the password", tc.url, msg, p)
			}
		}
		if !strings.Contains(msg, "xxxxx") || !strings.Contains(msg, tc.keep) {
			t.Errorf("FromURL(%q): %q; want the password as xxxxx, and %q named", tc.url, msg, tc.keep)
		}
	}
}

// TestFromURLTLSAndSentinel: floodgate's query parameters (tls.go) reach
// the client's options, and each one set where it means nothing is an
// error naming it, without the sentinels' password.
func TestFromURLTLSAndSentinel(t *testing.T) {
	opt, err := redisopt.FromURL("rediss://s1:26379?master_set=m&sentinel_user=u&sentinel_password=pw&sentinel_tls=true&tls_skip_hostname=true", 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Sentinel.Username != "u" || opt.Sentinel.Password != "pw" || opt.Sentinel.TLSConfig == nil ||
		!opt.TLSConfig.InsecureSkipVerify || opt.TLSConfig.VerifyConnection == nil || opt.TLSConfig.ServerName != "" {
		t.Errorf("sentinel %+v, TLS skip %v, verify set %v, server name %q; want u, pw, TLS to the sentinels, the chain verified alone, no fixed name",
			opt.Sentinel, opt.TLSConfig.InsecureSkipVerify, opt.TLSConfig.VerifyConnection != nil, opt.TLSConfig.ServerName)
	}
	opt, err = redisopt.FromURL("rediss://r:6380", 0, time.Second)
	if err != nil || opt.TLSConfig.InsecureSkipVerify || opt.TLSConfig.VerifyConnection != nil || opt.TLSConfig.ServerName != "r" || opt.Sentinel.TLSConfig != nil {
		t.Errorf("a plain rediss:// URL: %v, %+v; want rueidis's TLS, the host verified", err, opt.TLSConfig)
	}
	for _, tc := range []struct{ url, want string }{
		{"redis://r?tls_ca=/ca.pem", "tls_ca is set but the URL is not rediss://"},
		{"redis://r?tls_skip_hostname=1", "tls_skip_hostname is set but the URL is not rediss://"},
		{"rediss://r?tls_skip_hostname=often", `tls_skip_hostname="often" is not true or false`},
		{"rediss://r?tls_cert=/c.pem", "tls_cert and tls_key go together"},
		{"redis://r?sentinel_password=hunter2", "sentinel_password is set but the URL has no master_set"},
		{"rediss://r?tls_ca=/nonexistent/ca.pem", "tls_ca: open /nonexistent/ca.pem: no such file or directory"},
	} {
		_, err := redisopt.FromURL(tc.url, 0, time.Second)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v; want an error saying %q", tc.url, err, tc.want)
		}
	}
}
