package clientip_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-rl/floodgate/clientip"
)

// TestMappedPrefixEdges: an IPv4-mapped trusted prefix means its IPv4 form
// down to the shortest one, ::ffff:0.0.0.0/96, which is every IPv4
// address; a shorter IPv6 prefix is not a mapped one and trusts no IPv4
// peer (peers are unmapped before matching).
func TestMappedPrefixEdges(t *testing.T) {
	for _, tc := range []struct {
		trusted string
		peer    string
		want    string
	}{
		{"::ffff:0.0.0.0/96", "192.0.2.1:80", "203.0.113.9"},
		{"::ffff:0.0.0.0/96", "198.51.100.7:80", "203.0.113.9"},
		{"::ffff:0.0.0.0/96", "[::ffff:198.51.100.7]:80", "203.0.113.9"},
		{"::ffff:0.0.0.0/96", "[2001:db8::1]:80", "2001:db8::/64"},
		{"::ffff:192.0.2.0/120", "192.0.2.200:80", "203.0.113.9"},
		{"::ffff:192.0.2.0/120", "192.0.3.1:80", "192.0.3.1"},
		{"::ffff:192.0.2.1", "192.0.2.1:80", "203.0.113.9"},
		{"::ffff:192.0.2.1", "192.0.2.2:80", "192.0.2.2"},
		{"::/95", "192.0.2.1:80", "192.0.2.1"},
	} {
		t.Run(tc.trusted+" "+tc.peer, func(t *testing.T) {
			res, err := clientip.New(clientip.Options{TrustedProxies: []string{tc.trusted}})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tc.peer
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			if got := res.Key(req); got != tc.want {
				t.Fatalf("Key = %q; want %q", got, tc.want)
			}
		})
	}
}
