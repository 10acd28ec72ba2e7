// Package ginlimit runs floodgate's HTTP middleware (package httplimit) in
// gin. It lives in a module of its own, so that floodgate's main module
// never pulls gin.
//
//	ip, err := hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{{Rule: perIP, Key: httplimit.ClientIP(resolver)}}})
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
// echo needs no adapter: echo.WrapMiddleware(mw) runs an httplimit
// middleware as it is.
package ginlimit

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/gin-gonic/gin"
)

// ResultKey is the key of httplimit's Result in gin's context.
const ResultKey = "floodgate.result"

// Middleware runs mw, a middleware of httplimit.Limiter.Middleware, as a
// gin handler.
func Middleware(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
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
// limits follow their Missing policy (a skip is counted in
// floodgate_skipped_limits_total and logged once). Put it after
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
