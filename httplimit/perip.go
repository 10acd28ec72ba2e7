package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// PerIP returns middleware that lets each client address make limit
// requests per window, decided by l: the shortest start, as in
//
//	http.Handle("/", httplimit.PerIP(limiter, 100, time.Minute)(handler))
//
// The client is the request's peer (RemoteAddr; an IPv6 client is keyed
// by its /64); requests whose peer has no address (a Unix socket) share
// one count rather than go unlimited. Behind a proxy every client shares the proxy's address:
// build a Route with ClientIP and a clientip.Resolver that trusts the
// proxy instead. The rule is an exact sliding-window log up to
// 1,000 requests and a sliding-window counter above
// (its memory does not grow with the limit), named "ip-<limit>-per-<window>"
// so that PerIP limits of other limits or windows never share a count.
// Two PerIP of the same limit and window do share one, on every route
// they guard and in every replica (one per-IP quota over those routes,
// as one rule in a store must be): for a count per route, build a Route
// per route, each with a rule of its own name. A store that fails lets
// requests through (FailOpen: a limiter down must not take the service
// down), counted in no metric and logged to slog.Default, in aggregate:
// build a Routes with New, on an Enforcer of your own, for a failure
// mode, metrics and logs of your choosing. PerIP starts no goroutine.
//
// Like regexp.MustCompile, PerIP is for constants: it panics if limit or
// window is invalid (see floodgate.NewRule).
func PerIP(l *floodgate.Limiter, limit int64, window time.Duration) func(http.Handler) http.Handler {
	alg := floodgate.SlidingWindow
	if limit > bounds.DefaultLog {
		alg = floodgate.SlidingWindowCounter
	}
	rule := floodgate.Rule{Name: fmt.Sprintf("ip-%d-per-%v", limit, window), Limit: limit, Window: window, Algorithm: alg}
	resolver, err := clientip.New(clientip.Options{})
	if err != nil {
		panic(err) // the zero Options are valid
	}
	e, err := enforce.New(enforce.Options{Limiter: l, Local: l}) // Local set: no memstore of its own, nothing to close
	if err != nil {
		panic(err)
	}
	routes, err := New(Options{Enforcer: e})
	if err != nil {
		panic(err)
	}
	mw, err := routes.Middleware(Route{Limits: []Limit{{Rule: rule, Key: ClientIP(resolver), Missing: Share}}, Failure: enforce.FailOpen})
	if err != nil {
		panic(err)
	}
	return mw
}
