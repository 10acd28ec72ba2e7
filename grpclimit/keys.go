package grpclimit

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/keyfunc"
)

// KeyFunc returns the key that a call is limited by: a client address, an
// account, an API key. It reads the call's incoming context, which holds
// the peer, the metadata and whatever earlier interceptors stored (the
// authenticated principal). It returns "" when the call has none (an
// anonymous call has no principal): the limit then skips the call, and the
// skip is counted and its first one logged. Keys may hold any bytes; a key
// longer than 1 MiB is replaced by its SHA-256 digest. A
// KeyFunc that panics fails its call with codes.Internal, and the server
// goes on (gRPC recovers no panic by itself); the first panic of each
// limit is logged with its stack.
type KeyFunc func(ctx context.Context) string

// ClientIP keys calls by the address of the client, as res resolves it
// (see package clientip): the peer's address, unless the peer is one of
// res's trusted proxies, in which case the forwarding headers that res
// reads (X-Forwarded-For by default) are taken from the call's metadata,
// where gRPC carries them under lower-case names ("x-forwarded-for"). The
// key is "203.0.113.9", or an IPv6 /64 such as "2001:db8:1:2::/64". A nil
// res trusts no proxy: the key is the peer's address. The key is "" when
// the peer has no IP address (a Unix socket, an in-memory listener).
func ClientIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		res = new(clientip.Resolver)
	}
	names := res.Headers()
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = strings.ToLower(n) // metadata's own form: its lookup's fast path
	}
	return func(ctx context.Context) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		req := http.Request{RemoteAddr: p.Addr.String()}
		for i, k := range keys {
			if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
				if req.Header == nil {
					req.Header = make(http.Header, len(keys))
				}
				req.Header[names[i]] = v
			}
		}
		return res.Key(&req)
	}
}

// Metadata keys calls by the first value of the named metadata key (case
// does not matter), "" when absent or empty. The client writes it: key by
// metadata only when a client gains nothing by changing it (an API key
// that is checked, a tenant id), or pair the limit with a per-IP one.
func Metadata(key string) KeyFunc {
	key = strings.ToLower(key) // metadata's own form: its lookup's fast path
	return func(ctx context.Context) string {
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx that carries the authenticated
// principal (a user or account id) for [Principal]. An authentication
// interceptor calls it, and must run before the rate-limit interceptor
// (earlier in grpc.ChainUnaryInterceptor):
//
//	return handler(grpclimit.WithPrincipal(ctx, user.ID), req)
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal is a [KeyFunc] that keys calls by the principal stored with
// [WithPrincipal]; it returns "" for an anonymous call.
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// Join keys calls by all of fs together ("this account from this IP"):
// the parts are length-prefixed, so no two different combinations share a
// key. The key is "" if any part is. The key of "alice" from 192.0.2.1 is
// "5:alice9:192.0.2.1": how floodgate peek, reset and override take it.
func Join(fs ...KeyFunc) KeyFunc { return keyfunc.Join(fs...) }

// First keys calls by the first of fs that has a key (the principal if
// authenticated, else the client IP). The key records which function
// answered, so that a principal named "203.0.113.9" never shares the
// address's quota: the key of principal "alice" is "0:alice", of the
// second function's "192.0.2.1" "1:192.0.2.1" (how floodgate peek, reset
// and override take them). It is "" when none has a key.
func First(fs ...KeyFunc) KeyFunc { return keyfunc.First(fs...) }
