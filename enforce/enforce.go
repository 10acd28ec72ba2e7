package enforce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/pace"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// Defaults of [Options] and [Spec].
const (
	// defaultLogInterval is the least time between two log lines about one
	// gate's degraded decisions (or its shadow denials): the decisions in
	// between are counted in the next line.
	defaultLogInterval = 5 * time.Second
	// defaultMaxWaiters bounds the requests of one gate that wait for
	// quota at once.
	defaultMaxWaiters = 100
	// minFailRetryAfter is the least wait a fail-closed denial asks for:
	// during an outage, clients should not come back every second. When
	// the store's circuit breaker is open, the wait is its remaining open
	// time if that is longer.
	minFailRetryAfter = 5 * time.Second
	// maxPolicyLabels bounds the policies of rules that come with the
	// requests ([Gate.Check] of rules not among the Spec's limits, such as
	// an RLS caller's per-descriptor limit overrides) that one gate counts
	// under their own name in floodgate_decisions_total; the others are
	// counted under the policy "(other)", so that no client creates
	// series without bound. The Spec's own limits do not count against it.
	maxPolicyLabels = 1000
)

// ErrInvalid is wrapped by the errors of [New] and [Enforcer.Gate] about
// bad options or specs.
var ErrInvalid = errors.New("enforce: invalid options")

// Options configures an [Enforcer]. Only Limiter is required.
type Options struct {
	// Limiter decides against the shared store, within its
	// Options.Timeout (see the package doc on failures). Required.
	Limiter *floodgate.Limiter
	// Local decides FailLocal hits while the store fails. Nil means a
	// limiter on a memstore that the Enforcer owns and Close releases,
	// with Limiter's overrides (floodgate.Options.Overrides), so that a
	// key with a limit of its own keeps it, per replica, during an outage.
	Local *floodgate.Limiter
	// Breaker, if set, is the store's circuit breaker (a
	// *breakerstore.Store), exported as the floodgate_breaker_state gauge.
	Breaker interface{ State() gobreaker.State }
	// Registerer receives the metrics (see the package doc). Nil means no
	// metrics are registered.
	Registerer prometheus.Registerer
	// Logger receives the degraded-decision lines and the warnings about
	// limits that skip requests (a principal set after the rate-limit
	// check). Nil means slog.Default(): a warning always reaches someone.
	Logger *slog.Logger
}

// Enforcer holds what the gates of one process share: the limiters, the
// metrics, the logger, and the rule of each name. It is safe for
// concurrent use. Build one with [New] and Close it on shutdown.
type Enforcer struct {
	limiter, local *floodgate.Limiter
	ownLocal       *memstore.Store // nil unless New built Local
	logger         *slog.Logger
	metrics        *metrics
	released       broadcast // a lease was released: wakes throttled requests

	mu    sync.Mutex
	gates []*Gate                   // guarded by mu; their log summaries are flushed by Close
	rules map[string]floodgate.Rule // guarded by mu; the rule of each name, over all gates
}

// New returns an Enforcer for opts. It fails if opts.Limiter is nil or the
// metrics cannot be registered: a second Enforcer on one registerer gets
// one error that names the metric and wraps the
// prometheus.AlreadyRegisteredError, and registers nothing.
func New(opts Options) (*Enforcer, error) {
	if opts.Limiter == nil {
		return nil, fmt.Errorf("%w: Options.Limiter is nil", ErrInvalid)
	}
	m, err := newMetrics(opts.Registerer, opts.Breaker)
	if err != nil {
		return nil, err
	}
	e := &Enforcer{limiter: opts.Limiter, local: opts.Local, logger: opts.Logger,
		metrics: m, rules: make(map[string]floodgate.Rule)}
	if e.logger == nil {
		e.logger = slog.Default()
	}
	if e.local == nil {
		e.ownLocal = memstore.New(memstore.Options{})
		e.local, _ = floodgate.New(e.ownLocal, floodgate.Options{Timeout: -1, Overrides: opts.Limiter.Overrides()})
	}
	return e, nil
}

// Logger returns the logger of the degraded-decision lines, for the
// transports' own warnings.
func (e *Enforcer) Logger() *slog.Logger { return e.logger }

// Close writes the degraded-decision counts not yet logged and releases
// the local store that New built. The gates keep working after Close, but
// FailLocal hits then fail closed (unless Options.Local was given: it is
// the caller's to close).
func (e *Enforcer) Close() error {
	e.mu.Lock()
	gates := e.gates
	e.mu.Unlock()
	for _, g := range gates {
		g.log.stop()
		g.shadowLog.stop()
	}
	if e.ownLocal != nil {
		return e.ownLocal.Close()
	}
	return nil
}

// Limit is one rule of a [Spec].
type Limit struct {
	// Rule is the policy; its name appears in the answer's fields and the
	// metrics.
	Rule floodgate.Rule
	// Shadow checks and counts the limit but never lets it deny: how a
	// new limit is rolled out. A request that the other limits admit is
	// checked against each shadow limit on its own, recorded if within
	// it, and the outcome is counted in the decisions metric as
	// shadow_allowed or shadow_denied under the limit's policy; shadow
	// denials are logged as degraded decisions are (see the package doc).
	Shadow bool
}

// Spec describes a gate: the limits of one route, method or domain, and
// how they are enforced.
type Spec struct {
	// Name names the gate in metrics and logs. 1 to 128 bytes of A-Z a-z
	// 0-9 _ . - + / (a gRPC method's full name fits).
	Name string
	// Limits are the limits that [Gate.Hits] takes one key each for,
	// checked together, all-or-nothing; no two on the same rule name. A
	// gate used only with [Gate.Check] may have none.
	Limits []Limit
	// Failure is what the Limits do when the store fails; the zero value
	// is FailLocal. Hits gives it to each hit; [Gate.Check] takes each
	// hit's own Hit.Failure, so hits built by hand must set it (a hit of
	// a fail-closed gate without it fails local).
	Failure FailureMode
	// Shadow puts every limit in shadow mode (see Limit.Shadow).
	Shadow bool
	// MaxDelay slows down before it rejects: a request denied with a
	// retry-after of at most MaxDelay waits that long and is decided
	// again, for at most MaxDelay in all, and never past its context's
	// deadline: a wait that would outlast it is not started, and the
	// denial is the answer at once. A wait is no reservation: requests
	// that wait for the same key compete when they check again, and the
	// losers may be denied after waiting. A denial by concurrency limits
	// alone waits for a slot to be released, for at most MaxDelay (the
	// package doc's "Requests in flight"). Zero means no waiting.
	MaxDelay time.Duration
	// MaxWaiters bounds the requests of this gate waiting at once; a
	// request over the bound is denied at once. Zero means 100.
	MaxWaiters int
}

// Gate enforces the limits of one [Spec]. It is safe for concurrent use.
type Gate struct {
	spec       Spec
	e          *Enforcer
	maxWaiters int64
	m          *gateMetrics
	log        sometimes
	shadowLog  sometimes
	waiting    atomic.Int64
	skipWarned []atomic.Bool // by limit: the first skip of each is logged
}

// Gate returns the gate of s, or an error listing everything wrong with
// s, each wrapping [ErrInvalid]: Gates of one spec.
func (e *Enforcer) Gate(s Spec) (*Gate, error) {
	gs, err := e.Gates(s)
	if err != nil {
		return nil, err
	}
	return gs[0], nil
}

// Gates returns the gates of specs, in order, or builds none and returns
// an error listing everything wrong with them, each wrapping
// [ErrInvalid]: the routes or methods of one transport, built together.
// One rule name means one rule in all the gates of e: rules of one name
// share a key's count in the store (floodgate.Store), so a
// 2/min limit would be denied by the traffic of a 100/min one. A limit
// whose rule has another gate's rule name with other parameters, in specs
// or in a gate built before, is refused.
func (e *Enforcer) Gates(specs ...Spec) ([]*Gate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	gs, err := e.validate(specs)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		e.register(g)
	}
	return gs, nil
}

// register sets g up and adds it to e; e.mu is held.
func (e *Enforcer) register(g *Gate) {
	for _, lim := range g.spec.Limits {
		e.rules[lim.Rule.Name] = lim.Rule
	}
	g.log.interval = defaultLogInterval
	g.shadowLog.interval = defaultLogInterval
	names := make([]string, len(g.spec.Limits))
	for i, lim := range g.spec.Limits {
		names[i] = lim.Rule.Name
	}
	g.m = e.metrics.gate(g.spec.Name, names)
	g.m.warn = func() {
		e.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: a gate counts more policies that come with the requests than it labels (max); "+
			"the others are counted under the policy \"(other)\" in floodgate_decisions_total. Logged once",
			slog.String("gate", g.spec.Name), slog.Int("max", maxPolicyLabels))
	}
	g.skipWarned = make([]atomic.Bool, len(g.spec.Limits))
	e.gates = append(e.gates, g)
}

// Validate returns what [Enforcer.Gates] would refuse in specs, or nil,
// and builds nothing: for a transport that lists its own problems with
// its specs'.
func (e *Enforcer) Validate(specs ...Spec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.validate(specs)
	return err
}

// validate checks specs against e's rules and each other's; e.mu is
// held.
func (e *Enforcer) validate(specs []Spec) ([]*Gate, error) {
	var errs []error
	gs := make([]*Gate, len(specs))
	batch := make(map[string]floodgate.Rule)
	for k, s := range specs {
		g, err := e.validateOne(s, batch)
		errs = append(errs, err)
		gs[k] = g
		for _, lim := range s.Limits {
			if _, ok := batch[lim.Rule.Name]; !ok && lim.Rule.Validate() == nil {
				batch[lim.Rule.Name] = lim.Rule
			}
		}
	}
	return gs, errors.Join(errs...)
}

// validateOne checks s against e's rules and batch's, those of the specs
// before it; e.mu is held.
func (e *Enforcer) validateOne(s Spec, batch map[string]floodgate.Rule) (*Gate, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: gate %q: "+format, append([]any{ErrInvalid, s.Name}, args...)...))
	}
	g := &Gate{spec: s, e: e, maxWaiters: int64(s.MaxWaiters)}
	g.spec.Limits = slices.Clone(s.Limits)
	for i := range g.spec.Limits {
		lim := &g.spec.Limits[i]
		lim.Shadow = lim.Shadow || s.Shadow
		if err := lim.Rule.Validate(); err != nil {
			bad("limit %d: %w", i, err)
			continue
		}
		for j := range i {
			if s.Limits[j].Rule.Name == lim.Rule.Name {
				bad("limit %d: rule %s appears twice", i, lim.Rule.Name)
			}
		}
		prev, ok := e.rules[lim.Rule.Name]
		if !ok {
			prev, ok = batch[lim.Rule.Name]
		}
		if ok && prev != lim.Rule {
			bad("limit %d: rule %q is %v here but %v in another gate; one name must mean one rule in a process (rules of one name share their count): rename one", i, lim.Rule.Name, lim.Rule, prev)
		}
	}
	if !bounds.GateName(s.Name) {
		bad("name must be 1 to 128 bytes of A-Z a-z 0-9 _ . - + /")
	}
	if !s.Failure.valid() {
		bad("unknown failure mode %d", s.Failure)
	}
	if s.MaxDelay < 0 {
		bad("MaxDelay %v is negative", s.MaxDelay)
	}
	if g.maxWaiters < 0 {
		bad("MaxWaiters %d is negative", g.maxWaiters)
	} else if g.maxWaiters == 0 {
		g.maxWaiters = defaultMaxWaiters
	}
	return g, errors.Join(errs...)
}

// Hits returns the hits of a request whose keys are keys, one per limit
// of the Spec in order. A key "" means the request has no key for that
// limit: the limit is skipped, which is counted in
// floodgate_skipped_limits_total and logged the first time, since a
// per-user limit whose principal is never set (the rate-limit check runs
// before authentication) would otherwise limit nobody, silently. Keys
// beyond the Spec's limits are ignored; missing ones are "". A key longer
// than 1 MiB is replaced by its SHA-256 digest, so that no
// request's key makes an invalid hit.
func (g *Gate) Hits(ctx context.Context, keys []string) []Hit {
	hits := make([]Hit, 0, len(g.spec.Limits))
	for i, lim := range g.spec.Limits {
		if i >= len(keys) || keys[i] == "" {
			g.m.skipped[i].Inc()
			if !g.skipWarned[i].Swap(true) {
				g.e.logger.LogAttrs(ctx, slog.LevelWarn, "floodgate: a limit skipped a request that has no key for it; "+
					"if the key is the principal, set it before the rate-limit check runs. Counted in floodgate_skipped_limits_total; logged once",
					slog.String("gate", g.spec.Name), slog.String("policy", lim.Rule.Name))
			}
			continue
		}
		hits = append(hits, Hit{Hit: floodgate.Hit{Rule: lim.Rule, Key: fitKey(keys[i])}, Shadow: lim.Shadow, Failure: g.spec.Failure})
	}
	return hits
}

// throttles reports whether res, the decision on hits, is a denial worth
// waiting for.
func (g *Gate) throttles(res Result, hits []Hit) bool {
	return (res.Outcome == Denied || res.Outcome == Local && !res.Decision.Allowed) &&
		(res.Decision.RetryAfter <= g.spec.MaxDelay || leaseDenied(res, hits))
}

// throttle waits for quota while the denial's RetryAfter fits in what is
// left of MaxDelay, deciding again after each wait. It returns ctx's error
// as soon as the client goes away.
func (g *Gate) throttle(ctx context.Context, hits []Hit, res Result) (Result, error) {
	if g.waiting.Add(1) > g.maxWaiters {
		g.waiting.Add(-1)
		g.m.throttled["rejected"].Inc()
		return res, nil
	}
	g.m.waiting.Inc()
	defer func() { g.waiting.Add(-1); g.m.waiting.Dec() }()
	// A denial by concurrency limits alone waits for a release: one in
	// this process wakes it, another process's is seen by the next check,
	// at most leasePoll later. The channel is taken before each check, so
	// that no release is missed. Like floodgate.Limiter.Wait, no waiting
	// for quota that comes after the caller stopped listening (a gRPC
	// call's deadline): the denial, with its retry-after, is the better
	// answer then.
	released := g.e.released.wait()
	var err error
	werr := pace.Loop(ctx, g.spec.MaxDelay, func(left time.Duration) (time.Duration, <-chan struct{}, bool) {
		switch {
		case err != nil || !g.throttles(res, hits):
			return 0, nil, false
		case leaseDenied(res, hits):
			return min(res.Decision.RetryAfter, leasePoll(g.spec.MaxDelay), left), released, true
		}
		return res.Decision.RetryAfter, nil, res.Decision.RetryAfter <= left
	}, func() {
		released = g.e.released.wait()
		res, err = g.decide(ctx, hits)
	})
	if err = cmp.Or(werr, err); err != nil {
		g.m.throttled["canceled"].Inc()
		return res, err
	}
	if res.Allowed() {
		g.m.throttled["allowed"].Inc()
	} else {
		g.m.throttled["denied"].Inc()
	}
	return res, nil
}
