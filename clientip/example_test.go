package clientip_test

import (
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/floodgate-rl/floodgate/clientip"
)

// A load balancer at 192.0.2.10 appends the address it saw to
// X-Forwarded-For. The client wrote its own entry first, hoping to choose its
// key; the resolver takes the rightmost address that is not a trusted proxy.
func Example() {
	res, err := clientip.New(clientip.Options{
		TrustedProxies: []string{"192.0.2.0/24"},
		Headers:        []string{"X-Forwarded-For"}, // the only header our proxy writes
	})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/pix", nil)
	req.RemoteAddr = "192.0.2.10:39042"
	req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.9")
	fmt.Println(res.ClientIP(req), res.Key(req))

	// The same header from a peer that is not a trusted proxy is ignored.
	req.RemoteAddr = "203.0.113.9:51000"
	req.Header.Set("X-Forwarded-For", "198.51.100.1")
	fmt.Println(res.ClientIP(req), res.Key(req))
	// Output:
	// 203.0.113.9 203.0.113.9
	// 203.0.113.9 203.0.113.9
}

// IPv6 clients are keyed by their /64 by default, so a client cannot rotate
// through the addresses of its own subnet to get fresh quota.
func ExampleResolver_Key() {
	res, err := clientip.New(clientip.Options{})
	if err != nil {
		panic(err)
	}
	for _, remote := range []string{"[2001:db8:1:2::a]:443", "[2001:db8:1:2:ffff::b]:443", "[::ffff:203.0.113.9]:443", "@"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		fmt.Printf("%-28s %q\n", remote, res.Key(req))
	}
	// Output:
	// [2001:db8:1:2::a]:443        "2001:db8:1:2::/64"
	// [2001:db8:1:2:ffff::b]:443   "2001:db8:1:2::/64"
	// [::ffff:203.0.113.9]:443     "203.0.113.9"
	// @                            ""
}

// Forwarded (RFC 7239) elements may quote IPv6 addresses with ports and hide
// hops behind obfuscated identifiers. The walk stops at an entry that is not
// an address, at the last proxy that could still see the client.
func ExampleResolver_ClientIP_forwarded() {
	res, err := clientip.New(clientip.Options{
		TrustedProxies: []string{"192.0.2.0/24"},
		Headers:        []string{"Forwarded"}, // only if your proxies write it
	})
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.10:39042"

	req.Header.Set("Forwarded", `for="[2001:db8:1:2::9]:4711";proto=https, for=192.0.2.20`)
	fmt.Println(res.ClientIP(req))

	req.Header.Set("Forwarded", `for=198.51.100.1, for=_hidden, for=192.0.2.20`)
	fmt.Println(res.ClientIP(req))
	// Output:
	// 2001:db8:1:2::9
	// 192.0.2.20
}

func ExampleNew_invalid() {
	_, err := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24", "198.51.100.0/33"}, IPv6Prefix: 129})
	fmt.Println(errors.Is(err, clientip.ErrInvalidOptions))
	fmt.Println(err)
	// Output:
	// true
	// clientip: invalid options: TrustedProxies[1] "198.51.100.0/33" is not an IP address or CIDR prefix
	// clientip: invalid options: IPv6Prefix 129 is out of range (want 0 to 128; 0 means 64)
}
