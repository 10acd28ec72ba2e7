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
	"net/http"

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
// authentication middleware set under key (c.Set(key, id), a string), for
// limits keyed by httplimit.Principal. Put it after authentication and
// before Middleware. A request without one goes on without a principal,
// and its per-principal limits follow their Missing policy.
func Principal(key string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if id := c.GetString(key); id != "" {
			c.Request = c.Request.WithContext(httplimit.WithPrincipal(c.Request.Context(), id))
		}
		c.Next()
	}
}
