// Package ginlimit runs floodgate's HTTP middleware (package httplimit) in
// gin. It lives in a module of its own, so that floodgate's main module
// never pulls gin.
//
//	ip, err := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: perIP, Key: ginlimit.ClientIP}}})
//	...
//	r := gin.New()
//	r.Use(auth, ginlimit.Principal("user"))   // the id gin's auth set with c.Set("user", id)
//	r.POST("/pix", ginlimit.Middleware(pix), handler)
//
// A denied request is answered by httplimit (429 with the rate-limit fields
// and its body) and aborted; an allowed one continues down gin's chain with
// the rate-limit fields set and httplimit's Result in gin's context
// (Result) as well as in the request's (httplimit.FromContext).
//
// Behind a proxy, key by [ClientIP]: the client address as gin computes
// it (c.ClientIP), from the engine's own trusted proxies
// (SetTrustedProxies, TrustedPlatform). httplimit.ClientIP knows nothing
// of gin's settings: with a nil resolver it keys by the peer, which
// behind a proxy is the proxy, so every client would share one key.
//
// echo needs no adapter: echo.WrapMiddleware(mw) runs an httplimit
// middleware as it is.
package ginlimit

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"

	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/gin-gonic/gin"
)

// ResultKey is the key of httplimit's Result in gin's context.
const ResultKey = "floodgate.result"

// Middleware runs mw, a middleware of httplimit.Routes.Middleware, as a
// gin handler.
func Middleware(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), clientIPKey{}, c.ClientIP()))
		passed := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r // carries the Result and anything else mw added
			if res, ok := httplimit.FromContext(r.Context()); ok {
				c.Set(ResultKey, res)
			}
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort() // mw answered: the rest of the chain must not run
		}
	}
}

type clientIPKey struct{}

// ClientIP is an httplimit.KeyFunc that keys a request by gin's client
// address (c.ClientIP, which follows the engine's trusted proxies): an
// IPv4 address as text, an IPv6 one by its /64 prefix, as
// httplimit.ClientIP keys them. It reads what Middleware saw, so it
// serves only limits run by Middleware; elsewhere, and for an address
// gin could not tell, it returns "" (the limit's Missing policy applies).
func ClientIP(r *http.Request) string {
	s, _ := r.Context().Value(clientIPKey{}).(string)
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	if a = a.Unmap().WithZone(""); a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// Result returns httplimit's verdict on the request of c, set by
// Middleware.
func Result(c *gin.Context) (httplimit.Result, bool) {
	v, ok := c.Get(ResultKey)
	if !ok {
		return httplimit.Result{}, false
	}
	res, ok := v.(httplimit.Result)
	return res, ok
}

// Principal hands httplimit the authenticated principal that gin's
// authentication middleware set under key (c.Set(key, id)), for limits
// keyed by httplimit.Principal. The id may be a string, an integer of any
// size (a database key: 42 and "42" are the same principal) or a
// fmt.Stringer (its String()); any other type, like a missing or empty
// id, leaves the request without a principal, and its per-principal
// limits follow their Missing policy (a skip is counted and logged:
// enforce.Gate.Hits). Put it after
// authentication and before Middleware.
func Principal(key string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if v, ok := c.Get(key); ok {
			if id := principal(v); id != "" {
				c.Request = c.Request.WithContext(httplimit.WithPrincipal(c.Request.Context(), id))
			}
		}
		c.Next()
	}
}

// principal returns the text of an id: a string, an integer (of any
// integer type, named ones such as a UserID included) or a fmt.Stringer;
// "" for any other type.
func principal(v any) string {
	if id, ok := v.(fmt.Stringer); ok {
		if rv := reflect.ValueOf(id); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "" // no user: a nil *User would panic in String
		}
		return id.String()
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.String:
		return rv.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10)
	}
	return ""
}
