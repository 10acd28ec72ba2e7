package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of [Options] and [Route].
const (
	// DefaultLogInterval is the least time between two log lines about one
	// route's degraded decisions.
	DefaultLogInterval = 5 * time.Second
	// DefaultMaxWaiters bounds the requests of one route that wait for
	// quota at once.
	DefaultMaxWaiters = 100
	// MinFailRetryAfter is the least Retry-After of a fail-closed 429:
	// during an outage, clients should not come back every second. When
	// the store's circuit breaker is open, the Retry-After is its remaining
	// open time if that is longer.
	MinFailRetryAfter = 5 * time.Second
)

// ErrInvalidOptions is wrapped by the errors of [New] and
// [Limiter.Middleware] about bad options or routes.
var ErrInvalidOptions = errors.New("httplimit: invalid options")

// Options configures a [Limiter]. Only Limiter is required.
type Options struct {
	// Limiter decides against the shared store. Its Options.Timeout is the
	// time budget of each decision (floodgate.DefaultTimeout, 50ms, unless
	// set); put a breakerstore in front of the store so that a dead store
	// fails fast. Required.
	Limiter *floodgate.Limiter
	// Local decides for FailLocal routes while the store fails. Nil means a
	// limiter on a memstore that the Limiter owns and Close releases.
	Local *floodgate.Limiter
	// Breaker, if set, is exported as the floodgate_breaker_state gauge.
	Breaker *breakerstore.Store
	// Registerer receives the metrics (see the package doc). Nil means no
	// metrics are registered.
	Registerer prometheus.Registerer
	// Logger receives the degraded-decision lines. Nil means no logging.
	Logger *slog.Logger
	// LogInterval is the least time between two log lines about one
	// route's degraded decisions; the decisions in between are counted in
	// the next line. Zero means DefaultLogInterval (5s).
	LogInterval time.Duration
	// NoLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset, which are sent by default.
	NoLegacyHeaders bool
}

// Limiter builds rate-limit middleware for the routes of one service. It
// holds what the routes share: the limiters, the metrics and the logger.
// It is safe for concurrent use. Build one with [New] and Close it on
// shutdown.
type Limiter struct {
	limiter, local *floodgate.Limiter
	ownLocal       *memstore.Store // nil unless New built Local
	logger         *slog.Logger
	logEvery       time.Duration
	legacy         bool
	metrics        *metrics

	mu     sync.Mutex
	routes []*route                  // guarded by mu; their log summaries are flushed by Close
	rules  map[string]floodgate.Rule // guarded by mu; the rule of each name, over all routes
}

// New returns a Limiter for opts. It fails if opts.Limiter is nil or the
// metrics cannot be registered: a second Limiter on one registerer gets
// one error that names the metric and wraps the
// prometheus.AlreadyRegisteredError, and registers nothing.
func New(opts Options) (*Limiter, error) {
	if opts.Limiter == nil {
		return nil, fmt.Errorf("%w: Options.Limiter is nil", ErrInvalidOptions)
	}
	if opts.LogInterval < 0 {
		return nil, fmt.Errorf("%w: LogInterval %v is negative", ErrInvalidOptions, opts.LogInterval)
	}
	m, err := newMetrics(opts.Registerer, opts.Breaker)
	if err != nil {
		return nil, err
	}
	l := &Limiter{limiter: opts.Limiter, local: opts.Local, logger: opts.Logger, logEvery: opts.LogInterval,
		legacy: !opts.NoLegacyHeaders, metrics: m, rules: make(map[string]floodgate.Rule)}
	if l.logger == nil {
		l.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if l.logEvery == 0 {
		l.logEvery = DefaultLogInterval
	}
	if l.local == nil {
		l.ownLocal = memstore.New(memstore.Options{})
		l.local, _ = floodgate.New(l.ownLocal, floodgate.Options{Timeout: -1})
	}
	return l, nil
}

// Close writes the degraded-decision counts not yet logged and releases
// the local store that New built. The middleware keeps working after
// Close, but FailLocal routes then fail closed.
func (l *Limiter) Close() error {
	l.mu.Lock()
	routes := l.routes
	l.mu.Unlock()
	for _, rt := range routes {
		rt.log.stop()
		rt.shadowLog.stop()
	}
	if l.ownLocal != nil {
		return l.ownLocal.Close()
	}
	return nil
}

// Limit is one rule applied to one key of a request.
type Limit struct {
	// Rule is the policy; its name appears in the headers and metrics.
	// Limits on the same rule name and key share their count, across
	// routes too: give one global per-IP rule to every route.
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
	// denials are logged, at most one line per LogInterval. Shadow limits
	// send no rate-limit fields and are not refunded by Result.Refund.
	Shadow bool
}

// Route configures the middleware of one route.
type Route struct {
	// Name names the route in metrics and logs, and is the policy name that
	// an opaque route reports. Zero means the names of its rules joined by
	// "+". 1 to 128 bytes of A-Z a-z 0-9 _ . - +.
	Name string
	// Limits are checked together, all-or-nothing: either each records the
	// request or none does, and the answer reports the worst (multi-level
	// limits: a global per-IP rule and a strict per-principal one). At
	// least one; no two on the same rule name.
	Limits []Limit
	// Failure is what to do when the store fails; the zero value is
	// FailLocal.
	Failure FailureMode
	// Shadow puts every limit of the route in shadow mode (see
	// Limit.Shadow): the route never denies, and counts what it would do.
	Shadow bool
	// Opaque makes a denial say nothing about which limit refused it: for
	// login, where "the account is blocked" tells an attacker the account
	// exists and is under attack. The route sends no RateLimit-Policy,
	// RateLimit or X-RateLimit-* fields on any response; its denials are
	// byte-identical, with the route's Name as the only violated policy
	// and a Retry-After of its longest window (a bound on every limit's
	// wait); a fail-closed denial is the same answer with FailStatus. It
	// cannot be combined with MaxDelay, whose wait would tell the time
	// each key has left.
	Opaque bool
	// MaxDelay slows down before it rejects: a request denied with a
	// RetryAfter of at most MaxDelay waits that long and is decided again,
	// for at most MaxDelay in all. Zero means no waiting.
	MaxDelay time.Duration
	// MaxWaiters bounds the requests of this route waiting at once; a
	// request over the bound is denied at once. Zero means
	// DefaultMaxWaiters (100).
	MaxWaiters int
	// Status is the status of a denial. Zero means 429. Retry-After is
	// sent only with 429.
	Status int
	// FailStatus is the status of a fail-closed denial. Zero means 429.
	FailStatus int
	// Deny writes a denial, after the middleware has set Cache-Control,
	// Retry-After and the rate-limit fields. Nil means p.ServeHTTP: an
	// application/problem+json body.
	Deny func(w http.ResponseWriter, r *http.Request, p Problem)
}

// route is a built Route.
type route struct {
	Route
	l           *Limiter
	legacy      bool
	status      int
	failStatus  int
	maxWaiters  int64
	denyFunc    func(http.ResponseWriter, *http.Request, Problem)
	policies    map[string]string // serialized RateLimit-Policy member by rule name
	allPolicies string            // the RateLimit-Policy of a request that every limit checks
	opaqueRetry string            // Retry-After of an opaque denial
	m           *routeMetrics
	log         sometimes
	shadowLog   sometimes
	nestWarned  atomic.Bool // a nesting in another route's middleware was logged
	waiting     atomic.Int64
	skipWarned  []atomic.Bool // by limit: the first skip of each is logged
}

// Middleware returns the middleware of route rt, or an error listing
// everything wrong with rt, each wrapping [ErrInvalidOptions].
//
// The middleware evaluates the keys, checks every limit with one
// all-or-nothing decision within the limiter's time budget, applies the
// route's failure mode if the store fails, waits if the route throttles,
// and then either calls next with the [Result] in the request's context
// and the rate-limit fields set, or answers the denial.
func (l *Limiter) Middleware(rt Route) (func(http.Handler) http.Handler, error) {
	r, err := l.build(rt)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, next) })
	}, nil
}

func (l *Limiter) build(rt Route) (*route, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: route %q: "+format, append([]any{ErrInvalidOptions, rt.Name}, args...)...))
	}
	r := &route{Route: rt, l: l, legacy: l.legacy, status: rt.Status, failStatus: rt.FailStatus,
		maxWaiters: int64(rt.MaxWaiters), denyFunc: rt.Deny, policies: make(map[string]string)}
	r.Limits = append([]Limit(nil), rt.Limits...)
	if r.Shadow {
		for i := range r.Limits {
			r.Limits[i].Shadow = true
		}
	}
	var names []string
	var longest time.Duration
	for i, lim := range r.Limits {
		if err := lim.Rule.Validate(); err != nil {
			bad("limit %d: %w", i, err)
			continue
		}
		if _, dup := r.policies[lim.Rule.Name]; dup {
			bad("limit %d: rule %s appears twice", i, lim.Rule.Name)
		}
		if lim.Key == nil {
			bad("limit %d (%s): Key is nil", i, lim.Rule.Name)
		}
		if lim.Missing > Share {
			bad("limit %d (%s): unknown Missing %d", i, lim.Rule.Name, lim.Missing)
		}
		member, err := policyMember(lim.Rule)
		if err != nil {
			bad("limit %d (%s): %w", i, lim.Rule.Name, err)
		}
		r.policies[lim.Rule.Name] = member
		if i > 0 {
			r.allPolicies += ", "
		}
		r.allPolicies += member
		names = append(names, lim.Rule.Name)
		longest = max(longest, lim.Rule.Window)
	}
	if len(r.Limits) == 0 {
		bad("no limits")
	}
	if r.Name == "" {
		r.Name = strings.Join(names, "+")
	}
	if len(r.Name) > 128 || strings.Trim(r.Name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-+") != "" {
		bad("name must be 1 to 128 bytes of A-Z a-z 0-9 _ . - +")
	}
	if r.Failure > FailOpen {
		bad("unknown failure mode %d", r.Failure)
	}
	switch {
	case r.MaxDelay < 0:
		bad("MaxDelay %v is negative", r.MaxDelay)
	case r.MaxDelay > 0 && r.Opaque:
		bad("an opaque route cannot throttle: the wait would tell which key is limited")
	}
	if r.maxWaiters < 0 {
		bad("MaxWaiters %d is negative", r.maxWaiters)
	} else if r.maxWaiters == 0 {
		r.maxWaiters = DefaultMaxWaiters
	}
	for _, s := range []*int{&r.status, &r.failStatus} {
		if *s == 0 {
			*s = http.StatusTooManyRequests
		} else if *s < 400 || *s > 599 {
			bad("status %d is not an error status (400-599)", *s)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// One name, one rule, in every route of the process: rules that share
	// a name (and algorithm and window) share one count in the store, so a
	// 2/min route would be denied by the traffic of a 100/min one.
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lim := range r.Limits {
		if prev, ok := l.rules[lim.Rule.Name]; ok && prev != lim.Rule {
			bad("limit %d: rule %q is %v here but %v on another route; one name must mean one rule in a process (rules of one name share their count): rename one", i, lim.Rule.Name, lim.Rule, prev)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, lim := range r.Limits {
		l.rules[lim.Rule.Name] = lim.Rule
	}
	if r.denyFunc == nil {
		r.denyFunc = func(w http.ResponseWriter, req *http.Request, p Problem) { p.ServeHTTP(w, req) }
	}
	r.opaqueRetry = retryAfter(longest)
	r.log.interval = l.logEvery
	r.shadowLog.interval = l.logEvery
	r.m = l.metrics.route(r.Name, names)
	r.skipWarned = make([]atomic.Bool, len(r.Limits))
	l.routes = append(l.routes, r)
	return r, nil
}

// hits returns the hits of req: one per limit that has a key, the
// enforced ones and the shadow ones apart. A limit
// skipped for want of a key is counted, and its first skip logged: a
// per-user limit whose principal is never set (the rate-limit middleware
// runs before authentication) would otherwise limit nobody, silently.
func (rt *route) hits(req *http.Request) (hits, shadow []floodgate.Hit) {
	hits = make([]floodgate.Hit, 0, len(rt.Limits))
	for i, lim := range rt.Limits {
		k := lim.Key(req)
		if k == "" {
			if lim.Missing == Skip {
				rt.m.skipped[i].Inc()
				if !rt.skipWarned[i].Swap(true) {
					rt.l.logger.LogAttrs(req.Context(), slog.LevelWarn, "floodgate: a limit skipped a request that has no key for it, as its Missing says; "+
						"if the key is the principal, set it (WithPrincipal) before the rate-limit middleware runs. Counted in floodgate_http_skipped_limits_total; logged once",
						slog.String("route", rt.Name), slog.String("policy", lim.Rule.Name))
				}
				continue
			}
			k = missingKey
		}
		h := floodgate.Hit{Rule: lim.Rule, Key: fitKey(k)}
		if lim.Shadow {
			shadow = append(shadow, h)
			continue
		}
		hits = append(hits, h)
	}
	return hits, shadow
}

func (rt *route) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	ctx := req.Context()
	res := Result{Outcome: Skipped}
	hits, shadow := rt.hits(req)
	outer, nested := FromContext(ctx)
	if nested {
		hits, shadow = rt.nest(ctx, &outer, hits), uncounted(&outer, shadow)
	}
	decided := len(hits) > 0
	if decided {
		var err error
		if res, err = rt.decide(ctx, hits); err == nil && rt.MaxDelay > 0 && rt.throttles(res) {
			res, err = rt.throttle(ctx, hits, res)
		}
		if err != nil {
			return // the client went away: nobody reads an answer
		}
	}
	// A route that enforced nothing because an outer one counted its
	// limits, or because its limits are all shadow ones, reports nothing
	// of its own.
	if decided || !nested && len(shadow) == 0 {
		rt.m.decision(res)
	}
	if res.limiter != nil && !rt.Opaque {
		legacy := keepWorst(w.Header(), nested)
		rt.writeQuota(w.Header(), res.Decision)
		legacy()
	}
	if !res.allowed() {
		if nested {
			// All-or-nothing across the nesting: the outer route's hits
			// are undone, as if this route had been part of its check.
			_ = outer.Refund(context.WithoutCancel(ctx))
		}
		rt.deny(w, req, res)
		return
	}
	switch {
	case decided && nested:
		res.outer = &outer // the request's verdict covers every route's hits
	case nested:
		res = outer // this route decided nothing: the outer verdict stands
	}
	// Shadow limits are checked only against a store that just answered,
	// or when no enforced limit asked it: a failing store would make each
	// of them wait out its own budget.
	if len(shadow) > 0 && (!decided || res.Outcome == Allowed) {
		res.Shadow = append(res.Shadow[:len(res.Shadow):len(res.Shadow)], rt.shadow(ctx, shadow)...)
		res.shadowHits = append(res.shadowHits[:len(res.shadowHits):len(res.shadowHits)], shadow...)
	}
	next.ServeHTTP(w, req.WithContext(context.WithValue(ctx, resultKey{}, res)))
}

// decide checks hits against the store and, if the store fails, applies
// the route's failure mode. It returns an error only when ctx is done.
func (rt *route) decide(ctx context.Context, hits []floodgate.Hit) (Result, error) {
	start := time.Now()
	d, err := check(ctx, rt.l.limiter, hits)
	rt.m.latency.Observe(time.Since(start).Seconds())
	if err == nil {
		res := Result{Outcome: Allowed, Decision: d, limiter: rt.l.limiter, hits: hits}
		if !d.Allowed {
			res.Outcome = Denied
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	rt.m.storeError(err)
	res := Result{Outcome: FailedClosed, storeRetry: storeRetry(err)}
	switch rt.Failure {
	case FailOpen:
		res.Outcome = FailedOpen
	case FailLocal:
		if d, lerr := check(ctx, rt.l.local, hits); lerr == nil {
			res = Result{Outcome: Local, Decision: d, limiter: rt.l.local, hits: hits}
		}
	}
	rt.log.do(start, func(held int) { // may run later, from a timer: no request context
		rt.l.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: rate-limit store failed; decided by the route's failure mode",
			slog.String("route", rt.Name), slog.String("failure_mode", rt.Failure.String()),
			slog.String("outcome", res.Outcome.String()), slog.Any("error", err), slog.Int("suppressed", held))
	})
	return res, nil
}

// nest handles a route nested in other routes' middleware (a global
// per-IP middleware around per-route ones): it drops the hits that an
// outer route already counted, enforced or shadow, so that none counts
// twice, and logs the first nesting once. The rest composes in serve: the
// fields of every route are sent, the legacy ones of the worst, a denial
// here refunds the outer routes' hits, and the Result in the context
// covers every route.
func (rt *route) nest(ctx context.Context, outer *Result, hits []floodgate.Hit) []floodgate.Hit {
	if !rt.nestWarned.Swap(true) {
		rt.l.logger.LogAttrs(ctx, slog.LevelWarn, "floodgate: a rate-limit middleware runs inside another; "+
			"they compose (no hit counts twice, a denial here refunds the outer one's hits), but one Route with every limit is one atomic check: prefer it",
			slog.String("route", rt.Name))
	}
	return uncounted(outer, hits)
}

// uncounted returns the hits that no Result of the chain from r counted,
// enforced or shadow (the same rule name and key).
func uncounted(r *Result, hits []floodgate.Hit) []floodgate.Hit {
	kept := hits[:0]
	for _, h := range hits {
		same := func(o floodgate.Hit) bool { return o.Rule.Name == h.Rule.Name && o.Key == h.Key }
		counted := false
		for o := r; o != nil && !counted; o = o.outer {
			counted = slices.ContainsFunc(o.hits, same) || slices.ContainsFunc(o.shadowHits, same)
		}
		if !counted {
			kept = append(kept, h)
		}
	}
	return kept
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

// shadow checks each shadow hit on its own, recording it if within its
// limit, and counts and logs what it would have done. A store that fails
// decides nothing, and counts nothing.
func (rt *route) shadow(ctx context.Context, hits []floodgate.Hit) []floodgate.Decision {
	out := make([]floodgate.Decision, 0, len(hits))
	for _, h := range hits {
		d, err := rt.l.limiter.Allow(ctx, h.Rule, h.Key)
		if err != nil {
			if ctx.Err() == nil {
				rt.m.storeError(err)
			}
			break // the store failed: the others would wait out their budgets too
		}
		out = append(out, d)
		rt.m.shadowed(h.Rule.Name, d.Allowed)
		if !d.Allowed {
			rt.shadowLog.do(time.Now(), func(held int) {
				rt.l.logger.LogAttrs(context.Background(), slog.LevelInfo, "floodgate: a shadow limit would have denied a request",
					slog.String("route", rt.Name), slog.String("policy", d.Policy), slog.Duration("retry_after", d.RetryAfter),
					slog.Int("suppressed", held))
			})
		}
	}
	return out
}

// storeRetry returns how long a failed store is expected to stay
// unavailable: the remaining open time of a circuit breaker, found on
// err's chain through a RetryAfter() time.Duration method (as
// breakerstore.OpenError has), or zero.
func storeRetry(err error) time.Duration {
	var open interface{ RetryAfter() time.Duration }
	if errors.As(err, &open) {
		return max(open.RetryAfter(), 0)
	}
	return 0
}

// check decides hits with l; one hit goes through Allow, which the core
// serves faster.
func check(ctx context.Context, l *floodgate.Limiter, hits []floodgate.Hit) (floodgate.Decision, error) {
	if len(hits) == 1 {
		return l.Allow(ctx, hits[0].Rule, hits[0].Key)
	}
	return l.Check(ctx, hits...)
}

// throttles reports whether res is a denial worth waiting for.
func (rt *route) throttles(res Result) bool {
	return (res.Outcome == Denied || res.Outcome == Local && !res.Decision.Allowed) &&
		res.Decision.RetryAfter <= rt.MaxDelay
}

// throttle waits for quota while the denial's RetryAfter fits in what is
// left of MaxDelay, deciding again after each wait. It returns ctx's error
// as soon as the client goes away.
func (rt *route) throttle(ctx context.Context, hits []floodgate.Hit, res Result) (Result, error) {
	if rt.waiting.Add(1) > rt.maxWaiters {
		rt.waiting.Add(-1)
		rt.m.throttled["rejected"].Inc()
		return res, nil
	}
	rt.m.waiting.Inc()
	defer func() { rt.waiting.Add(-1); rt.m.waiting.Dec() }()
	// The first wait may take all of MaxDelay, as throttles allowed; each
	// later one must fit in what is left of it.
	deadline := time.Now().Add(rt.MaxDelay)
	for left := rt.MaxDelay; rt.throttles(res) && res.Decision.RetryAfter <= left; left = time.Until(deadline) {
		t := time.NewTimer(max(res.Decision.RetryAfter, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			rt.m.throttled["canceled"].Inc()
			return res, ctx.Err()
		case <-t.C:
		}
		var err error
		if res, err = rt.decide(ctx, hits); err != nil {
			rt.m.throttled["canceled"].Inc()
			return res, err
		}
	}
	if res.allowed() {
		rt.m.throttled["allowed"].Inc()
	} else {
		rt.m.throttled["denied"].Inc()
	}
	return res, nil
}
