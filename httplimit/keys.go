package httplimit

import (
	"context"
	"net/http"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/keyfunc"
)

// KeyFunc returns the key that a request is limited by: a client address,
// an account, an API key. It returns "" when the request has none (an
// anonymous request has no principal); what happens then is the
// [Limit]'s [Missing] policy. Keys may hold any bytes; a key longer than
// 1 MiB is replaced by its SHA-256 digest.
type KeyFunc func(*http.Request) string

// ClientIP keys requests by the address of the client, as res resolves it
// behind trusted proxies (see package clientip): "203.0.113.9", or an IPv6
// /64 such as "2001:db8:1:2::/64". A nil res trusts no proxy: the key is
// the peer's address. The key is "" only when the peer has no IP address
// (a Unix socket).
func ClientIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		res = new(clientip.Resolver)
	}
	return res.Key
}

// Header keys requests by the value of the named header (its first line),
// "" when absent or empty. The client writes it: key by a header only when
// a client gains nothing by changing it (an API key that is checked, a
// tenant id), or pair the limit with a per-IP one.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx that carries the authenticated
// principal (a user or account id) for [Principal]. An authentication
// middleware calls it before the rate-limit middleware runs:
//
//	next.ServeHTTP(w, r.WithContext(httplimit.WithPrincipal(r.Context(), user.ID)))
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal is a [KeyFunc] that keys requests by the principal stored with
// [WithPrincipal]; it returns "" for an anonymous request.
func Principal(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(string)
	return p
}

// Join keys requests by all of fs together ("this account from this IP"):
// the parts are length-prefixed, so no two different combinations share a
// key. The key is "" if any part is. The key of "alice" from 192.0.2.1 is
// "5:alice9:192.0.2.1": how floodgate peek, reset and override take it.
func Join(fs ...KeyFunc) KeyFunc { return keyfunc.Join(fs...) }

// First keys requests by the first of fs that has a key (the principal if
// authenticated, else the client IP). The key records which function
// answered, so that a principal named "203.0.113.9" never shares the
// address's quota: the key of principal "alice" is "0:alice", of the
// second function's "192.0.2.1" "1:192.0.2.1" (how floodgate peek, reset
// and override take them). It is "" when none has a key.
func First(fs ...KeyFunc) KeyFunc { return keyfunc.First(fs...) }

// Missing says what a [Limit] does with a request whose [KeyFunc]
// returns "".
type Missing uint8

const (
	// Skip leaves the request out of this limit; the route's other limits
	// still apply (an anonymous request is not counted per principal, but
	// is per IP). A request that every limit skips passes unlimited, with
	// the outcome Skipped. This is the zero value.
	Skip Missing = iota
	// Share counts every request without a key under one shared key of
	// that limit, so together they get the limit once: the choice for a
	// client-IP limit on a server whose peers can lack an address.
	Share
)

// missingKey is the key shared under Share. No KeyFunc of this package
// returns it, and a header value cannot hold a NUL byte.
const missingKey = "\x00"
