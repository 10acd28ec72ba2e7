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
