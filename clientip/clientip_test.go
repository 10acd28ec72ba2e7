package clientip_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/clientip"
)

// Proxies in 192.0.2.0/24 and 2001:db8:ffff::/48; clients in 198.51.100.0/24,
// 203.0.113.0/24 and the rest of 2001:db8::/32.
var testProxies = []string{"192.0.2.0/24", "2001:db8:ffff::/48"}

// bothHeaders reads Forwarded first, then X-Forwarded-For, as a proxy that
// writes both would be configured.
var bothHeaders = []string{"Forwarded", "X-Forwarded-For"}

func newRequest(remote string, header http.Header) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = remote
	req.Header = header
	return req
}

func mustNew(t testing.TB, o clientip.Options) *clientip.Resolver {
	t.Helper()
	r, err := clientip.New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return r
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    clientip.Options // TrustedProxies defaults to testProxies, Headers to bothHeaders
		remote  string
		header  http.Header
		want    string // "" for the zero Addr
		wantKey string // defaults to want
	}{
		// The peer.
		{name: "untrusted peer", remote: "203.0.113.9:4711", want: "203.0.113.9"},
		{name: "untrusted peer without port", remote: "203.0.113.9", want: "203.0.113.9"},
		{name: "untrusted IPv6 peer keyed by /64", remote: "[2001:db8:1:2:3:4:5:6]:443",
			want: "2001:db8:1:2:3:4:5:6", wantKey: "2001:db8:1:2::/64"},
		{name: "IPv6 peer without brackets or port", remote: "2001:db8::1", want: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "IPv6 peer in brackets without port", remote: "[2001:db8::1]", want: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "mapped peer is unmapped", remote: "[::ffff:203.0.113.9]:80", want: "203.0.113.9"},
		{name: "peer zone is stripped", remote: "[2001:db8:1:2::9%eth0]:80", want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "empty RemoteAddr", remote: "", want: ""},
		{name: "unix socket RemoteAddr", remote: "@", want: ""},
		{name: "garbage RemoteAddr", remote: "not an address:80", want: ""},
		{name: "RemoteAddr with bad port", remote: "203.0.113.9:99999", want: ""},
		{name: "garbage RemoteAddr ignores headers", remote: "garbage",
			header: http.Header{"X-Forwarded-For": {"198.51.100.7"}}, want: ""},

		// Spoofing: headers are ignored unless the peer is trusted.
		{name: "untrusted peer X-Forwarded-For ignored", remote: "203.0.113.9:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.7"}}, want: "203.0.113.9"},
		{name: "untrusted peer Forwarded ignored", remote: "203.0.113.9:1",
			header: http.Header{"Forwarded": {"for=198.51.100.7"}}, want: "203.0.113.9"},
		{name: "untrusted peer X-Real-IP ignored", remote: "203.0.113.9:1",
			header: http.Header{"X-Real-Ip": {"198.51.100.7"}, "True-Client-Ip": {"198.51.100.8"}}, want: "203.0.113.9"},
		{name: "untrusted peer listing a trusted proxy", remote: "203.0.113.9:1",
			header: http.Header{"X-Forwarded-For": {"192.0.2.1"}}, want: "203.0.113.9"},
		{name: "trusted peer X-Real-IP ignored by default", remote: "192.0.2.1:1",
			header: http.Header{"X-Real-Ip": {"198.51.100.7"}, "True-Client-Ip": {"198.51.100.8"}}, want: "192.0.2.1"},

		// X-Forwarded-For.
		{name: "trusted peer without headers", remote: "192.0.2.1:1", want: "192.0.2.1"},
		{name: "XFF one hop", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9"}}, want: "203.0.113.9"},
		{name: "XFF prepended addresses lose to rightmost untrusted", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, 192.0.2.200, 203.0.113.9"}}, want: "203.0.113.9"},
		{name: "XFF trusted hops skipped", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, 203.0.113.9, 192.0.2.3, 2001:db8:ffff::7"}}, want: "203.0.113.9"},
		{name: "XFF all trusted gives leftmost", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"192.0.2.5, 192.0.2.4, 192.0.2.3"}}, want: "192.0.2.5"},
		{name: "XFF lines merged in order", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, 203.0.113.9", "192.0.2.3", "192.0.2.2"}}, want: "203.0.113.9"},
		{name: "XFF later line wins", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9", "198.51.100.7"}}, want: "198.51.100.7"},
		{name: "XFF IPv4 with port", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9:1234"}}, want: "203.0.113.9"},
		{name: "XFF IPv6 with port", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"[2001:db8:1:2::9]:80"}}, want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "XFF bare IPv6", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"2001:db8:1:2::9"}}, want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "XFF mapped client unmapped", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"::ffff:203.0.113.9"}}, want: "203.0.113.9"},
		{name: "XFF mapped trusted hop skipped", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9, ::ffff:192.0.2.3"}}, want: "203.0.113.9"},
		{name: "XFF zone stripped", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"2001:db8:1:2::9%eth0"}}, want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "XFF empty entries ignored", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {",198.51.100.66, ,203.0.113.9 , 192.0.2.3,", ""}}, want: "203.0.113.9"},
		{name: "XFF garbage left of client ignored", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"garbage, 203.0.113.9"}}, want: "203.0.113.9"},
		{name: "XFF garbage stops walk at the proxy right of it", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, garbage, 192.0.2.3"}}, want: "192.0.2.3"},
		{name: "XFF rightmost garbage falls back to peer", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, unknown"}}, want: "192.0.2.1"},
		{name: "XFF bad port is garbage", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66, 203.0.113.9:http"}}, want: "192.0.2.1"},
		{name: "XFF unclosed bracket is garbage", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9, [2001:db8::9"}}, want: "192.0.2.1"},
		{name: "XFF port without colon is garbage", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9, [2001:db8::9]80"}}, want: "192.0.2.1"},
		{name: "XFF binary garbage", remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"\x00\xff[[]]:::,,\"\\"}}, want: "192.0.2.1"},
		{name: "trusted IPv6 peer", remote: "[2001:db8:ffff::1]:443",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9"}}, want: "203.0.113.9"},
		{name: "mapped trusted peer", remote: "[::ffff:192.0.2.1]:443",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9"}}, want: "203.0.113.9"},

		// Forwarded (RFC 7239).
		{name: "Forwarded one hop", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=203.0.113.9"}}, want: "203.0.113.9"},
		{name: "Forwarded quoted IPv6 with port", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for="[2001:db8:1:2::9]:4711"`}}, want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "Forwarded IPv4 with port", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=203.0.113.9:8080`}}, want: "203.0.113.9"},
		{name: "Forwarded quoted IPv4 with obfuscated port", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for="203.0.113.9:_port1"`}}, want: "203.0.113.9"},
		{name: "Forwarded other parameters and case", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`proto=https;FOR="203.0.113.9";by=192.0.2.1;host="a,b;c"`}}, want: "203.0.113.9"},
		{name: "Forwarded spaces around pairs", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {` for = 203.0.113.9 ; proto=http `}}, want: "203.0.113.9"},
		{name: "Forwarded quoted-pair", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for="203.0.113.\9"`}}, want: "203.0.113.9"},
		{name: "Forwarded quoted-pairs around IPv6", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for="\[2001:db8:1:2::9\]:80"`}}, want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::/64"},
		{name: "Forwarded escaped closing quote is garbage", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=203.0.113.7, for="203.0.113.9\"`}}, want: "192.0.2.1"},
		{name: "Forwarded prepended addresses lose", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66, for=203.0.113.9, for=192.0.2.3"}}, want: "203.0.113.9"},
		{name: "Forwarded all trusted gives leftmost", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=192.0.2.4, for="[2001:db8:ffff::3]"`}}, want: "192.0.2.4"},
		{name: "Forwarded lines merged", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66", "for=203.0.113.9", "for=192.0.2.3"}}, want: "203.0.113.9"},
		{name: "Forwarded unknown stops walk", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66, for=unknown, for=192.0.2.3"}}, want: "192.0.2.3"},
		{name: "Forwarded obfuscated stops walk", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66, for=_hidden, for=192.0.2.3"}}, want: "192.0.2.3"},
		{name: "Forwarded element without for stops walk", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66, proto=https, for=192.0.2.3"}}, want: "192.0.2.3"},
		{name: "Forwarded repeated for stops walk", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66, for=203.0.113.9;for=198.51.100.7, for=192.0.2.3"}}, want: "192.0.2.3"},
		{name: "Forwarded open quote does not swallow next line", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for="198.51.100.66, for=192.0.2.9`, "for=203.0.113.9"}}, want: "203.0.113.9"},
		{name: "Forwarded open quote is garbage", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=203.0.113.9, for="192.0.2.3`}}, want: "192.0.2.1"},
		{name: "Forwarded lone quote is garbage", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=203.0.113.9, for="`}}, want: "192.0.2.1"},
		{name: "Forwarded text after closing quote is garbage", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {`for=203.0.113.9, for="192.0.2.3"x`}}, want: "192.0.2.1"},
		{name: "Forwarded empty elements ignored", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {",for=203.0.113.9,, "}}, want: "203.0.113.9"},

		// Choosing between headers.
		{name: "Forwarded preferred over XFF", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=203.0.113.9"}, "X-Forwarded-For": {"198.51.100.7"}}, want: "203.0.113.9"},
		{name: "XFF used when Forwarded ends in unknown", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=203.0.113.9, for=unknown"}, "X-Forwarded-For": {"198.51.100.7"}}, want: "198.51.100.7"},
		{name: "XFF used when Forwarded has no for", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"proto=https"}, "X-Forwarded-For": {"198.51.100.7"}}, want: "198.51.100.7"},
		{name: "peer when neither header yields an address", remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=_x"}, "X-Forwarded-For": {"unknown"}}, want: "192.0.2.1"},
		{name: "Headers XFF only ignores Forwarded",
			opts: clientip.Options{Headers: []string{"x-forwarded-for"}}, remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66"}, "X-Forwarded-For": {"203.0.113.9"}}, want: "203.0.113.9"},
		{name: "Headers X-Real-IP only", opts: clientip.Options{Headers: []string{"X-Real-IP"}}, remote: "192.0.2.1:1",
			header: http.Header{"X-Real-Ip": {"203.0.113.9"}, "X-Forwarded-For": {"198.51.100.66"}}, want: "203.0.113.9"},
		{name: "Headers X-Real-IP from untrusted peer ignored", opts: clientip.Options{Headers: []string{"X-Real-IP"}},
			remote: "198.51.100.1:1", header: http.Header{"X-Real-Ip": {"203.0.113.9"}}, want: "198.51.100.1"},
		{name: "Headers empty list reads none", opts: clientip.Options{Headers: []string{}}, remote: "192.0.2.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.66"}, "X-Forwarded-For": {"203.0.113.9"}}, want: "192.0.2.1"},

		// Options.
		{name: "single trusted address", opts: clientip.Options{TrustedProxies: []string{"192.0.2.1"}}, remote: "192.0.2.1:1",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9, 192.0.2.2"}}, want: "192.0.2.2"},
		{name: "mapped trusted prefix matches IPv4", opts: clientip.Options{TrustedProxies: []string{"::ffff:192.0.2.0/120"}},
			remote: "192.0.2.1:1", header: http.Header{"X-Forwarded-For": {"203.0.113.9, 192.0.2.2"}}, want: "203.0.113.9"},
		{name: "IPv6Prefix 48", opts: clientip.Options{IPv6Prefix: 48}, remote: "[2001:db8:1:2::9]:1",
			want: "2001:db8:1:2::9", wantKey: "2001:db8:1::/48"},
		{name: "IPv6Prefix 128", opts: clientip.Options{IPv6Prefix: 128}, remote: "[2001:db8:1:2::9]:1",
			want: "2001:db8:1:2::9", wantKey: "2001:db8:1:2::9"},
		{name: "IPv6Prefix does not touch IPv4", opts: clientip.Options{IPv6Prefix: 48}, remote: "203.0.113.9:1",
			want: "203.0.113.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.opts.TrustedProxies == nil {
				tt.opts.TrustedProxies = testProxies
			}
			if tt.opts.Headers == nil {
				tt.opts.Headers = bothHeaders
			}
			res := mustNew(t, tt.opts)
			req := newRequest(tt.remote, tt.header)
			got := res.ClientIP(req)
			if tt.want == "" {
				if got.IsValid() {
					t.Errorf("ClientIP = %v, want the zero Addr", got)
				}
			} else if got != netip.MustParseAddr(tt.want) {
				t.Errorf("ClientIP = %v, want %v", got, tt.want)
			}
			wantKey := tt.wantKey
			if wantKey == "" {
				wantKey = tt.want
			}
			if key := res.Key(req); key != wantKey {
				t.Errorf("Key = %q, want %q", key, wantKey)
			}
		})
	}
}

// TestSpoofing checks that no header a client can add changes its key: not
// without a proxy, and not behind a trusted proxy that appends to the header.
func TestSpoofing(t *testing.T) {
	t.Parallel()
	res := mustNew(t, clientip.Options{TrustedProxies: testProxies, Headers: []string{"X-Forwarded-For"}})
	spoofs := []string{
		"", "198.51.100.66", "192.0.2.3", "198.51.100.66, 192.0.2.3", "unknown",
		"[2001:db8::66]:80", "::ffff:192.0.2.3", "garbage, 192.0.2.3", ",,,", `"`,
	}
	for _, spoof := range spoofs {
		direct := newRequest("203.0.113.9:4711", http.Header{"X-Forwarded-For": {spoof}})
		if got := res.Key(direct); got != "203.0.113.9" {
			t.Errorf("direct client sending X-Forwarded-For %q: key %q, want 203.0.113.9", spoof, got)
		}
		// The proxy appends the address it saw, either to the client's line or as its own line.
		for _, h := range []http.Header{
			{"X-Forwarded-For": {spoof + ", 203.0.113.9"}},
			{"X-Forwarded-For": {spoof, "203.0.113.9"}},
		} {
			proxied := newRequest("192.0.2.1:80", h)
			if got := res.Key(proxied); got != "203.0.113.9" {
				t.Errorf("proxied client sending X-Forwarded-For %q: key %q, want 203.0.113.9", spoof, got)
			}
		}
	}
}

func TestZeroResolver(t *testing.T) {
	t.Parallel()
	var res clientip.Resolver
	req := newRequest("[2001:db8:1:2::9]:1", http.Header{"X-Forwarded-For": {"203.0.113.9"}})
	if got, want := res.ClientIP(req), netip.MustParseAddr("2001:db8:1:2::9"); got != want {
		t.Errorf("ClientIP = %v, want %v: the zero Resolver trusts no proxy", got, want)
	}
	if got, want := res.Key(req), "2001:db8:1:2::/64"; got != want {
		t.Errorf("Key = %q, want %q: the zero Resolver keys IPv6 by /64", got, want)
	}
	if got := res.ClientIP(nil); got.IsValid() {
		t.Errorf("ClientIP(nil) = %v, want the zero Addr", got)
	}
	if got := res.Key(nil); got != "" {
		t.Errorf("Key(nil) = %q, want \"\"", got)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts clientip.Options
		errs []string // substrings of the error, one per bad field; none means valid
	}{
		{name: "zero", opts: clientip.Options{}},
		{name: "valid", opts: clientip.Options{
			TrustedProxies: []string{"192.0.2.0/24", " 198.51.100.7 ", "2001:db8::/32", "2001:db8::1%eth0", "::ffff:192.0.2.1", "192.0.2.7/24"},
			IPv6Prefix:     56,
			Headers:        []string{"X-Real-IP", "forwarded"},
		}},
		{name: "IPv6Prefix 128", opts: clientip.Options{IPv6Prefix: 128}},
		{name: "bad CIDR", opts: clientip.Options{TrustedProxies: []string{"192.0.2.0/24", "198.51.100.0/33"}},
			errs: []string{`TrustedProxies[1] "198.51.100.0/33"`}},
		{name: "every bad field listed", opts: clientip.Options{
			TrustedProxies: []string{"proxy.example", "", "192.0.2.0/24", "2001:db8::/129"},
			IPv6Prefix:     129,
			Headers:        []string{"X Real IP", ""},
		}, errs: []string{
			`TrustedProxies[0] "proxy.example"`, `TrustedProxies[1] ""`, `TrustedProxies[3] "2001:db8::/129"`,
			"IPv6Prefix 129", `Headers[0] "X Real IP"`, `Headers[1] ""`,
		}},
		{name: "negative IPv6Prefix", opts: clientip.Options{IPv6Prefix: -1}, errs: []string{"IPv6Prefix -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := clientip.New(tt.opts)
			if len(tt.errs) == 0 {
				if err != nil || res == nil {
					t.Fatalf("New = %v, %v; want a Resolver", res, err)
				}
				return
			}
			if err == nil || res != nil {
				t.Fatalf("New = %v, %v; want an error", res, err)
			}
			if !errors.Is(err, clientip.ErrInvalidOptions) {
				t.Errorf("error %q does not wrap ErrInvalidOptions", err)
			}
			msg := err.Error()
			if n := len(strings.Split(msg, "\n")); n != len(tt.errs) {
				t.Errorf("error has %d lines, want one per bad field (%d):\n%s", n, len(tt.errs), msg)
			}
			for _, want := range tt.errs {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not name %s:\n%s", want, msg)
				}
			}
		})
	}
}

func BenchmarkClientIP(b *testing.B) {
	res := mustNew(b, clientip.Options{TrustedProxies: testProxies})
	req := newRequest("192.0.2.1:80", http.Header{
		"Forwarded":       {`for=198.51.100.66;proto=https, for="[2001:db8:1:2::9]:4711", for=192.0.2.3`},
		"X-Forwarded-For": {"198.51.100.66, 203.0.113.9, 192.0.2.3"},
	})
	b.ReportAllocs()
	for b.Loop() {
		res.Key(req)
	}
}

// By default only X-Forwarded-For is read: most proxies pass Forwarded
// through as the client wrote it.
func TestDefaultIgnoresForwarded(t *testing.T) {
	res := mustNew(t, clientip.Options{TrustedProxies: testProxies})
	req := newRequest("192.0.2.1:1", http.Header{"Forwarded": {"for=198.51.100.66"}, "X-Forwarded-For": {"203.0.113.9"}})
	if got := res.Key(req); got != "203.0.113.9" {
		t.Fatalf("Key = %q; want the X-Forwarded-For client, not the Forwarded one", got)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts clientip.Options
		want []string
	}{
		{"default", clientip.Options{}, []string{"X-Forwarded-For"}},
		{"listed, canonical, in order", clientip.Options{Headers: []string{"forwarded", "x-real-ip"}}, []string{"Forwarded", "X-Real-Ip"}},
		{"none", clientip.Options{Headers: []string{}}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustNew(t, tt.opts)
			got := res.Headers()
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Headers() = %q, want %q", got, tt.want)
			}
			if len(got) > 0 {
				got[0] = "changed"
				if res.Headers()[0] == "changed" {
					t.Fatal("Headers returned the Resolver's own slice: a caller's write changed it")
				}
			}
		})
	}
	var zero clientip.Resolver
	if got := zero.Headers(); len(got) != 0 {
		t.Errorf("the zero Resolver's Headers() = %q, want none: it reads no header", got)
	}
}
