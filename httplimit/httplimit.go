package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/report"
)

// ErrInvalidOptions is wrapped by the errors of [New] and
// [Routes.Middleware] about bad options or routes. It is
// enforce.ErrInvalid, which the enforcement layer's errors wrap too.
var ErrInvalidOptions = enforce.ErrInvalid

// Options configures a [Routes].
type Options struct {
	// Enforcer is the enforcement layer of the routes: its limiters,
	// metrics and logger. Required: the caller builds it with enforce.New
	// and closes it on shutdown (package enforce says who shares it).
	Enforcer *enforce.Enforcer
	// NoLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset, which are sent by default.
	NoLegacyHeaders bool
}

// Routes builds rate-limit middleware for the routes of one service, on
// the enforcement layer that the routes share. It is safe for concurrent
// use. Build one with [New]; it holds nothing to release.
type Routes struct {
	e      *enforce.Enforcer
	legacy bool
}

// New returns a Routes for opts, or an error wrapping [ErrInvalidOptions]
// if opts.Enforcer is nil.
func New(opts Options) (*Routes, error) {
	if opts.Enforcer == nil {
		return nil, fmt.Errorf("%w: Options.Enforcer is nil: build one with enforce.New", ErrInvalidOptions)
	}
	return &Routes{e: opts.Enforcer, legacy: !opts.NoLegacyHeaders}, nil
}

// Limit is one rule applied to one key of a request.
type Limit struct {
	// Rule is the policy; its name appears in the headers and metrics.
	// Limits on the same rule name and key share their count, across
	// routes too: give one global per-IP rule to every route. So give a
	// rule one kind of key: a rule keyed by client IP on one route and by
	// a header on another lets a client send a victim's address in the
	// header and spend the victim's quota: give each kind its own rule
	// name ([First] tags each key with its source, for one limit keyed
	// by several).
	Rule floodgate.Rule
	// Key returns the key the rule counts; required.
	Key KeyFunc
	// Missing is what happens when Key returns "": Skip (the zero value)
	// or Share.
	Missing Missing
	// Shadow checks and counts the limit but never lets it deny: how a
	// new limit is rolled out. A request that the route's other limits
	// admit is checked against each shadow limit on its own, recorded if
	// within it, and the outcome is counted in the decisions metric as
	// shadow_allowed or shadow_denied under the limit's policy; shadow
	// denials are logged in aggregate, as degraded decisions are. Shadow
	// limits send no rate-limit fields and are not refunded by
	// Result.Refund.
	Shadow bool
	// Cost, if set, is what a request costs under the limit, estimated
	// before the handler runs (the tokens of an LLM prompt, the rows of a
	// query); nil, and a cost of 0, mean 1 (floodgate.Hit.Cost). A cost
	// above the rule's capacity is a 500,
	// like any invalid hit. The handler settles the estimate with the
	// actual cost through the request's Result (enforce.Result.Settle):
	// an overrun is charged past the limit, an underrun refunded.
	Cost func(*http.Request) int64
}

// Route configures the middleware of one route.
type Route struct {
	// Name names the route in metrics and logs, and is the policy name that
	// an opaque route reports. Zero means the names of its rules joined by
	// "+". 1 to 128 bytes of A-Z a-z 0-9 _ . - + / (enforce.Spec.Name).
	Name string
	// Limits are checked together, all-or-nothing: either each records the
	// request or none does, and the answer reports the worst (multi-level
	// limits: a global per-IP rule and a strict per-principal one). At
	// least one; no two on the same rule name.
	Limits []Limit
	// Failure is what to do when the store fails; the zero value is
	// FailLocal.
	Failure enforce.FailureMode
	// Shadow puts every limit of the route in shadow mode (see
	// Limit.Shadow): the route never denies, and counts what it would do.
	Shadow bool
	// Opaque makes a denial say nothing about which limit refused it: for
	// login, where "the account is blocked" tells an attacker the account
	// exists and is under attack. The route sends no RateLimit-Policy,
	// RateLimit or X-RateLimit-* fields on any response, not even those
	// of routes it is nested in or wraps; its denials are
	// byte-identical, with the route's Name as the only violated policy
	// and a Retry-After of its longest window, a live rule's included
	// and a shadow limit's not (a bound on every limit's wait); a
	// fail-closed denial is the same answer with FailStatus, and waits at
	// least Result.FailRetryAfter. It cannot be combined with MaxDelay,
	// whose wait would tell the time each key has left.
	Opaque bool
	// MaxDelay slows down before it rejects: a request denied with a
	// RetryAfter of at most MaxDelay waits that long and is decided again,
	// for at most MaxDelay in all. Zero means no waiting.
	MaxDelay time.Duration
	// MaxWaiters bounds the requests of this route waiting at once; a
	// request over the bound is denied at once. Zero means
	// enforce.Spec.MaxWaiters's default.
	MaxWaiters int
	// Status is the status of a denial. Zero means 429. Retry-After is
	// sent only with 429 and 503 (RFC 9110 §10.2.3).
	Status int
	// FailStatus is the status of a fail-closed denial. Zero means 429;
	// 503 is apt too, and also carries Retry-After.
	FailStatus int
	// Deny, if set, answers a denial, after the middleware has set
	// Cache-Control, Retry-After and the rate-limit fields. answer writes
	// the default one, the application/problem+json body of the package
	// doc: Deny may log or count and then call answer.ServeHTTP(w, r), or
	// write an answer of its own. r's context holds the verdict
	// ([FromContext]). Deny answers every denial of the route, those of a
	// failed store included: the verdict's Outcome tells them apart (a
	// fail-closed denial has no Decision, and waits
	// enforce.Result.FailRetryAfter). Nil means answer.ServeHTTP(w, r).
	Deny func(w http.ResponseWriter, r *http.Request, answer http.Handler)
}

// route is a built Route.
type route struct {
	Route
	l          *Routes
	gate       *enforce.Gate
	status     int
	failStatus int
	costs      bool         // a limit has a Cost
	rules      report.Rules // what the answers say of the Route's enforced rules
}

// Middleware returns the middleware of route rt, or an error listing
// everything wrong with rt, each wrapping [ErrInvalidOptions].
//
// The middleware evaluates the keys, checks every limit with one
// all-or-nothing decision within the limiter's time budget, applies the
// route's failure mode if the store fails, waits if the route throttles,
// and then either calls next with the [Result] in the request's context
// and the rate-limit fields set, or answers the denial (Route.Deny).
func (l *Routes) Middleware(rt Route) (func(http.Handler) http.Handler, error) {
	r, err := l.build(rt)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, next) })
	}, nil
}

// build checks what is HTTP's in rt and hands the rest to a gate of the
// enforcement layer, which checks the limits and failure mode.
func (l *Routes) build(rt Route) (*route, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: route %q: "+format, append([]any{ErrInvalidOptions, rt.Name}, args...)...))
	}
	r := &route{Route: rt, l: l, status: rt.Status, failStatus: rt.FailStatus}
	r.Limits = slices.Clone(rt.Limits)
	spec := enforce.Spec{Name: rt.Name, Failure: rt.Failure, Shadow: rt.Shadow, MaxDelay: rt.MaxDelay, MaxWaiters: rt.MaxWaiters}
	var names []string
	for i, lim := range r.Limits {
		spec.Limits = append(spec.Limits, enforce.Limit{Rule: lim.Rule, Shadow: lim.Shadow})
		if lim.Key == nil {
			bad("limit %d (%s): Key is nil", i, lim.Rule.Name)
		}
		if lim.Missing > Share {
			bad("limit %d (%s): unknown Missing %d", i, lim.Rule.Name, lim.Missing)
		}
		if lim.Rule.Validate() != nil {
			continue // the gate says what is wrong
		}
		names = append(names, lim.Rule.Name)
		r.costs = r.costs || lim.Cost != nil
	}
	if len(r.Limits) == 0 {
		bad("no limits")
	}
	if spec.Name == "" {
		spec.Name = strings.Join(names, "+")
		r.Name = spec.Name
	}
	if r.MaxDelay > 0 && r.Opaque {
		bad("an opaque route cannot throttle: the wait would tell which key is limited")
	}
	for _, s := range []*int{&r.status, &r.failStatus} {
		if *s == 0 {
			*s = http.StatusTooManyRequests
		} else if *s < 400 || *s > 599 {
			bad("status %d is not an error status (400-599)", *s)
		}
	}
	if len(errs) > 0 {
		// The gate is not built (it would claim the rule names), but its
		// problems are listed too.
		if err := l.e.Validate(spec); err != nil {
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	g, err := l.e.Gate(spec)
	if err != nil {
		return nil, err
	}
	r.gate = g
	var enforced []floodgate.Rule // a shadow limit is in no field, and makes nobody wait
	for _, lim := range r.Limits {
		if !lim.Shadow && !r.Shadow {
			enforced = append(enforced, lim.Rule)
		}
	}
	r.rules = report.NewRules(enforced)
	return r, nil
}

// keys returns the key of each limit for req, "" for a limit that skips
// it: Missing decides whether a request with no key skips the limit or
// shares one key.
func (rt *route) keys(req *http.Request) []string {
	keys := make([]string, len(rt.Limits))
	for i, lim := range rt.Limits {
		k := lim.Key(req)
		if k == "" && lim.Missing == Share {
			k = missingKey
		}
		keys[i] = k // the gate digests a key too long for the store
	}
	return keys
}

func (rt *route) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	ctx := req.Context()
	hits := rt.gate.Hits(ctx, rt.keys(req))
	if rt.costs {
		for i, h := range hits {
			for _, lim := range rt.Limits {
				if lim.Cost != nil && lim.Rule.Name == h.Rule.Name {
					hits[i].Cost = lim.Cost(req)
				}
			}
		}
	}
	outer, nested := FromContext(ctx)
	// An opaque route sends no rate-limit fields on any answer: neither
	// its own, nor those of the routes it is nested in or wraps.
	opaque := rt.Opaque || outer.opaque
	if nested {
		hits = rt.nest(ctx, &outer, hits)
		if opaque {
			dropQuota(w.Header())
		}
	}
	res := outer // a nested route with nothing left to check: the outer verdict stands
	var own enforce.Result
	if checked := !nested || len(hits) > 0; checked {
		var err error
		own, err = rt.gate.Check(ctx, hits)
		if err != nil {
			if ctx.Err() == nil { // a bug: the route's hits are valid by construction
				rt.l.e.Logger().LogAttrs(ctx, slog.LevelError, "floodgate: rate-limit check refused its input",
					slog.String("route", rt.Name), slog.Any("error", err))
				http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			}
			return // else the client went away: nobody reads an answer
		}
		res = rt.compose(own, outer, nested)
		if report.Decided(own.Outcome) && !opaque {
			legacy := keepWorst(w.Header(), nested)
			rt.writeQuota(w.Header(), own.Decision)
			legacy()
		}
	}
	res.opaque = opaque
	if !res.Allowed() {
		if nested {
			// All-or-nothing across the nesting: the outer route's hits
			// are undone, as if this route had been part of its check.
			_ = outer.Refund(context.WithoutCancel(ctx))
		}
		rt.deny(w, req, res)
		return
	}
	// The request holds its leases until the handler returns, renewed
	// even after its client left: the handler may still be at work.
	defer own.Hold(ctx)()
	next.ServeHTTP(w, req.WithContext(context.WithValue(ctx, resultKey{}, res)))
}

// compose returns the verdict on a request whose own check is own: with
// no outer route, own; nested in one, own on top of the outer verdict
// when this route enforced a limit, else the outer verdict with this
// route's shadow checks added.
func (rt *route) compose(own enforce.Result, outer Result, nested bool) Result {
	switch {
	case !nested:
		return Result{Result: own}
	case own.Outcome != enforce.Skipped:
		return Result{Result: own, outer: &outer}
	}
	res := outer
	res.Shadow = append(slices.Clip(outer.Shadow), own.Shadow...)
	res.also = append(slices.Clip(outer.also), own)
	return res
}

// nest handles a route nested in other routes' middleware (a global
// per-IP middleware around per-route ones, the documented pattern): it
// drops the hits that an outer route already counted, enforced or
// shadow, so that none counts twice. The rest composes in serve: the
// fields of every route are sent, the legacy ones of the worst, a denial
// here refunds the outer routes' hits, and the Result in the context
// covers every route.
func (rt *route) nest(ctx context.Context, outer *Result, hits []enforce.Hit) []enforce.Hit {
	return slices.DeleteFunc(hits, func(h enforce.Hit) bool { return outer.covers(h.Rule.Name, h.Key) })
}

// keepWorst remembers the legacy X-RateLimit-* fields that an outer route
// wrote, and returns what restores them after this route's, unless this
// route's report fewer requests remaining: the legacy fields describe the
// worst limit of the request.
func keepWorst(h http.Header, nested bool) func() {
	if !nested {
		return func() {}
	}
	old := h.Get(canonRemaining)
	if old == "" {
		return func() {}
	}
	saved := [3][]string{h[canonLimit], h[canonRemaining], h[canonReset]}
	return func() {
		was, err1 := strconv.ParseInt(old, 10, 64)
		now, err2 := strconv.ParseInt(h.Get(canonRemaining), 10, 64)
		if err1 == nil && err2 == nil && was < now {
			h[canonLimit], h[canonRemaining], h[canonReset] = saved[0], saved[1], saved[2]
		}
	}
}
