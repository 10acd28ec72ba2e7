package grpclimit_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// call returns the context of a server call from addr with the incoming
// metadata pairs.
func call(addr net.Addr, pairs ...string) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(pairs...))
	if addr != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	return ctx
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestClientIPKey(t *testing.T) {
	proxies, err := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	forwarded, err := clientip.New(clientip.Options{TrustedProxies: []string{"192.0.2.0/24"}, Headers: []string{"Forwarded"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		res  *clientip.Resolver
		ctx  context.Context
		want string
	}{
		{"peer", nil, call(tcp("203.0.113.9:5000")), "203.0.113.9"},
		{"IPv6 peer by /64", nil, call(tcp("[2001:db8:1:2::9]:5000")), "2001:db8:1:2::/64"},
		{"mapped IPv4 peer", nil, call(tcp("[::ffff:203.0.113.9]:5000")), "203.0.113.9"},
		{"nil resolver ignores x-forwarded-for", nil, call(tcp("192.0.2.1:5000"), "x-forwarded-for", "203.0.113.9"), "192.0.2.1"},
		{"untrusted peer's x-forwarded-for", proxies, call(tcp("198.51.100.1:5000"), "x-forwarded-for", "203.0.113.9"), "198.51.100.1"},
		{"trusted proxy", proxies, call(tcp("192.0.2.1:5000"), "x-forwarded-for", "203.0.113.9"), "203.0.113.9"},
		{"trusted proxy, rightmost untrusted wins", proxies, call(tcp("192.0.2.1:5000"),
			"x-forwarded-for", "198.51.100.7, 203.0.113.9", "x-forwarded-for", "192.0.2.8"), "203.0.113.9"},
		{"trusted proxy without the header", proxies, call(tcp("192.0.2.1:5000")), "192.0.2.1"},
		{"Forwarded read only when listed", proxies, call(tcp("192.0.2.1:5000"), "forwarded", "for=203.0.113.9"), "192.0.2.1"},
		{"Forwarded listed", forwarded, call(tcp("192.0.2.1:5000"), "forwarded", `for="[2001:db8:5::1]:80"`), "2001:db8:5::/64"},
		{"Unix socket peer", nil, call(&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}), ""},
		{"no peer", nil, call(nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := grpclimit.ClientIP(tc.res)(tc.ctx); got != tc.want {
				t.Errorf("ClientIP key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKeyFuncs(t *testing.T) {
	anon := call(tcp("203.0.113.9:1"), "x-api-key", "k-1", "x-api-key", "k-2", "x-empty", "")
	alice := grpclimit.WithPrincipal(anon, "alice")
	ip := grpclimit.ClientIP(nil)
	for _, tc := range []struct {
		name string
		f    grpclimit.KeyFunc
		ctx  context.Context
		want string
	}{
		{"metadata, first value", grpclimit.Metadata("x-api-key"), anon, "k-1"},
		{"metadata, any case", grpclimit.Metadata("X-Api-Key"), anon, "k-1"},
		{"metadata absent", grpclimit.Metadata("x-tenant"), anon, ""},
		{"metadata empty", grpclimit.Metadata("x-empty"), anon, ""},
		{"metadata without incoming metadata", grpclimit.Metadata("x-api-key"), context.Background(), ""},
		{"principal", grpclimit.Principal, alice, "alice"},
		{"anonymous", grpclimit.Principal, anon, ""},
		{"join", grpclimit.Join(grpclimit.Principal, ip), alice, "5:alice11:203.0.113.9"},
		{"join, a part missing", grpclimit.Join(grpclimit.Principal, ip), anon, ""},
		{"first, principal", grpclimit.First(grpclimit.Principal, ip), alice, "0:alice"},
		{"first, falls back", grpclimit.First(grpclimit.Principal, ip), anon, "1:203.0.113.9"},
		{"first, none", grpclimit.First(grpclimit.Principal), anon, ""},
		{"a principal that looks like an address", grpclimit.First(grpclimit.Principal, ip),
			grpclimit.WithPrincipal(anon, "203.0.113.9"), "0:203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f(tc.ctx); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}

// Join and First keep their own copy of the functions.
func TestKeyFuncsOwnTheirArguments(t *testing.T) {
	ctx := grpclimit.WithPrincipal(call(tcp("203.0.113.9:1")), "alice")
	fs := []grpclimit.KeyFunc{grpclimit.Principal, grpclimit.ClientIP(nil)}
	join, first := grpclimit.Join(fs...), grpclimit.First(fs...)
	fs[0] = grpclimit.Metadata("x-none")
	if got := join(ctx); got != "5:alice11:203.0.113.9" {
		t.Errorf("Join after the caller's slice changed: %q", got)
	}
	if got := first(ctx); got != "0:alice" {
		t.Errorf("First after the caller's slice changed: %q", got)
	}
}

// A metadata value longer than bounds.KeyLen is counted under its
// digest: two such values that differ only at the end count apart.
func TestLongKeysAreDigested(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "token", 1, time.Minute), Key: grpclimit.Metadata("x-token")}}},
	}})
	long := strings.Repeat("t", bounds.KeyLen)
	for i, tok := range []string{long + "a", long + "a", long + "b"} {
		a := empty(t, c, withMD("x-token", tok))
		if wantErr := i == 1; (a.err != nil) != wantErr {
			t.Fatalf("call %d: %v", i+1, a.err)
		}
	}
}
