package grpclimit_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/grpclimit"
)

// FuzzClientIPKey checks that a call's ClientIP key is the key that
// clientip gives the same peer and forwarding headers over HTTP, and that
// an untrusted peer's key is its own address whatever the metadata says.
func FuzzClientIPKey(f *testing.F) {
	f.Add("203.0.113.9", "for=198.51.100.7", "192.0.2.1:5000")
	f.Add("198.51.100.7, 192.0.2.8", "", "192.0.2.1:5000")
	f.Add("garbage, 203.0.113.9", `for="[2001:db8::1]:80"`, "[2001:db8:ffff::1]:443")
	f.Add("unknown", "for=_hidden", "198.51.100.1:5000")
	res, err := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24", "2001:db8:ffff::/48"},
		Headers: []string{"Forwarded", "X-Forwarded-For"}})
	if err != nil {
		f.Fatal(err)
	}
	key := grpclimit.ClientIP(res)
	f.Fuzz(func(t *testing.T, xff, fwd, peerAddr string) {
		ap, err := netip.ParseAddrPort(peerAddr)
		if err != nil {
			t.Skip()
		}
		var pairs []string
		h := http.Header{}
		for _, line := range strings.Split(xff, "\n") {
			pairs = append(pairs, "x-forwarded-for", line)
			h.Add("X-Forwarded-For", line)
		}
		if fwd != "" {
			pairs = append(pairs, "forwarded", fwd)
			h.Add("Forwarded", fwd)
		}
		got := key(call(tcp(ap.String()), pairs...))
		want := res.Key(&http.Request{RemoteAddr: ap.String(), Header: h})
		if got != want {
			t.Fatalf("gRPC key %q, HTTP key %q for peer %s, x-forwarded-for %q, forwarded %q", got, want, ap, xff, fwd)
		}
		if got == "" {
			t.Fatalf("no key for a call from %s", ap)
		}
		peer := ap.Addr().Unmap().WithZone("")
		trusted := netip.MustParsePrefix("192.0.2.0/24").Contains(peer) || netip.MustParsePrefix("2001:db8:ffff::/48").Contains(peer)
		if own := res.Key(&http.Request{RemoteAddr: ap.String()}); !trusted && got != own {
			t.Fatalf("untrusted peer %s keyed %q, want its own %q", ap, got, own)
		}
	})
}
