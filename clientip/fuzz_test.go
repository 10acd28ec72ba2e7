package clientip_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode"

	"github.com/floodgate-rl/floodgate/clientip"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

func FuzzXForwardedFor(f *testing.F) {
	fuzzHeader(f, "X-Forwarded-For")
}

func FuzzForwarded(f *testing.F) {
	fuzzHeader(f, "Forwarded")
}

// fuzzHeader checks, for any RemoteAddr and two lines of the header name, that
// the resolver never panics, returns the zero Addr or an unmapped zone-free
// address taken from RemoteAddr or the header, keys it consistently, ignores
// the header when the peer is not trusted, and lets no client-written line
// override the line that a trusted proxy appends.
func fuzzHeader(f *testing.F, name string) {
	trusting := mustNew(f, clientip.Options{TrustedProxies: testProxies, Headers: bothHeaders})
	ignoring := mustNew(f, clientip.Options{Headers: bothHeaders})
	appended := "203.0.113.9"
	if name == "Forwarded" {
		appended = `for="203.0.113.9:4711"`
	}
	f.Fuzz(func(t *testing.T, remote, line1, line2 string) {
		spoofed := newRequest("192.0.2.1:80", http.Header{name: {line1, line2, appended}})
		if got := trusting.ClientIP(spoofed); got != netip.MustParseAddr("203.0.113.9") {
			t.Fatalf("client wrote %s %q, %q before its proxy's %q: ClientIP = %v, want 203.0.113.9", name, line1, line2, appended, got)
		}
		req := newRequest(remote, http.Header{name: {line1, line2}})
		got := trusting.ClientIP(req)
		key := trusting.Key(req)
		if !got.IsValid() {
			if key != "" {
				t.Fatalf("Key = %q for the zero Addr, want \"\"", key)
			}
			return
		}
		if got.Is4In6() || got.Zone() != "" {
			t.Fatalf("ClientIP = %v, want unmapped and without zone", got)
		}
		if !mentions(got, remote) && !mentions(got, line1) && !mentions(got, line2) {
			t.Fatalf("ClientIP = %v, which is neither in RemoteAddr %q nor in %s %q, %q", got, remote, name, line1, line2)
		}
		if got.Is4() {
			if key != got.String() {
				t.Fatalf("Key = %q, want %v", key, got)
			}
		} else if p, err := netip.ParsePrefix(key); err != nil || p.Bits() != 64 || !p.Contains(got) {
			t.Fatalf("Key = %q, want the /64 holding %v", key, got)
		}
		direct := newRequest(remote, nil)
		if a, b := ignoring.ClientIP(req), ignoring.ClientIP(direct); a != b {
			t.Fatalf("untrusting resolver: ClientIP = %v with %s, %v without", a, name, b)
		}
		if !trusting.ClientIP(direct).IsValid() {
			t.Fatalf("ClientIP = %v with %s, but RemoteAddr %q is not an address", got, name, remote)
		}
	})
}

// mentions reports whether s contains a, in any spelling: it splits s at every
// separator the parsers know and tries each piece, and its part before a port.
func mentions(a netip.Addr, s string) bool {
	s = strings.ReplaceAll(s, `\`, "") // quoted-pairs
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`,;="[]%`, r)
	})
	for _, field := range fields {
		host, _, _ := strings.Cut(field, ":")
		for _, s := range []string{field, host} {
			if b, err := netip.ParseAddr(s); err == nil && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}
