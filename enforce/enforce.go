package enforce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
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

const nameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-+/"

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
		e.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: a gate counts more policies that come with the requests than enforce.MaxPolicyLabels; "+
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
	if s.Name == "" || len(s.Name) > 128 || strings.Trim(s.Name, nameChars) != "" {
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

// Hit is a hit with how it is enforced.
type Hit struct {
	floodgate.Hit
	// Shadow checks and counts the hit on its own but never lets it deny
	// (see Limit.Shadow).
	Shadow bool
	// Policy is the name the hit is reported under (the decisions'
	// Policy, the metrics' policy label, the logs): the name a
	// configuration gave the limit. Empty means the rule's name, which
	// also names its state in the store.
	Policy string
	// Failure is what the hit does when the store fails. With several
	// modes in one check, the strictest decides (see FailureMode); when
	// it is FailLocal, the FailLocal hits are decided by the local
	// limiter and the FailOpen ones pass.
	Failure FailureMode
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

// Check decides hits: the enforced ones together, all-or-nothing, within
// the limiter's time budget, by their failure modes if the store fails,
// waiting if the gate throttles; then, if the request is admitted, each
// shadow hit on its own. Every decision is counted and degraded ones are
// logged. Rules need not be among the Spec's limits: a gate may check
// rules that come with each request (an RLS domain's descriptors). A key
// longer than 1 MiB is replaced by its SHA-256 digest. The
// error is non-nil only when ctx is done (nobody waits for the answer) or
// an enforced hit is invalid (it wraps floodgate.ErrInvalidHit or
// ErrInvalidRule, or ErrInvalid for a failure mode that does not exist:
// the caller's input is at fault, not the store, so no failure mode
// applies); an invalid shadow hit is skipped.
//
// A request with no enforced hit is Skipped, and counted so if it has no
// shadow hit either.
func (g *Gate) Check(ctx context.Context, hits []Hit) (Result, error) {
	return g.run(ctx, hits, true)
}

// Peek is Check that records nothing: what Check would decide now, with
// the same failure modes, metrics and logs, and no waiting. The shadow
// hits are peeked together, for a request that the enforced ones admit.
// Its figures are the keys' as they stand, since nothing was taken: an
// allowed peek's Remaining does not count the hits it asked about (a
// hit of cost 0 asks about one), as a denied one's never does; what the
// metrics count is Check's figures.
func (g *Gate) Peek(ctx context.Context, hits []Hit) (Result, error) {
	res, err := g.run(ctx, hits, false)
	if err != nil {
		return res, err
	}
	res.Decision = asNow(res.Decision, res.hits)
	for k := range res.Shadow {
		if k < len(res.shadowHits) {
			res.Shadow[k] = asNow(res.Shadow[k], res.shadowHits[k:k+1])
		}
	}
	return res, nil
}

// asNow returns d, a peek's decision on hits, with the keys' figures as
// they stand: an allowed one's Remaining is as before the hits it asked
// about (the core's Peek reports it as after them), and its worst hit is
// picked from those figures. A denied peek reports them as they stand
// already: nothing of it would have been taken.
func asNow(d floodgate.Decision, hits []floodgate.Hit) floodgate.Decision {
	cost := func(h floodgate.Hit) int64 { return max(h.Cost, 1) }
	switch {
	case !d.Allowed:
		return d
	case d.Each == nil:
		if len(hits) == 1 {
			d.Remaining += cost(hits[0])
		}
		return d
	case len(d.Each) != len(hits):
		return d
	}
	worst := 0
	for i := range d.Each {
		d.Each[i].Remaining += cost(hits[i])
		if d.Each[i].Worse(d.Each[worst]) {
			worst = i
		}
	}
	top := d.Each[worst]
	top.Allowed, top.Recorded, top.Each = d.Allowed, d.Recorded, d.Each
	return top
}

// ask decides hits with l, recording them if record, or peeks at them.
func ask(ctx context.Context, l *floodgate.Limiter, hits []floodgate.Hit, record bool) (floodgate.Decision, error) {
	if !record {
		return l.Peek(ctx, hits...)
	}
	return l.Check(ctx, hits...)
}

func (g *Gate) run(ctx context.Context, hits []Hit, record bool) (Result, error) {
	var ebuf [4]Hit // the usual few, without an allocation when they do not escape
	enforced, shadow := ebuf[:0], []Hit(nil)
	for i, h := range hits {
		h.Key = fitKey(h.Key)
		if h.Shadow {
			shadow = append(shadow, h)
			continue
		}
		if !h.Failure.valid() {
			// Refused before the store is asked: a mode from an
			// unchecked value would otherwise fail open in an outage.
			err := fmt.Errorf("%w: gate %q: hit %d (%s): unknown failure mode %d", ErrInvalid, g.spec.Name, i, h.Rule.Name, h.Failure)
			return Result{Outcome: FailedClosed, Err: err}, err
		}
		enforced = append(enforced, h)
	}
	res := Result{Outcome: Skipped}
	if len(enforced) > 0 {
		var err error
		res, err = g.decide(ctx, enforced, record)
		if err == nil && record && g.spec.MaxDelay > 0 && g.throttles(res) {
			res, err = g.throttle(ctx, enforced, res)
		}
		if err != nil {
			// Refused, not admitted, for a caller that looks only at
			// Allowed; and not counted: nothing was decided.
			return Result{Outcome: FailedClosed, Err: err}, err
		}
	}
	if len(enforced) > 0 || len(shadow) == 0 {
		g.m.decision(res)
	}
	// Shadow hits are checked only against a store that just answered,
	// or when no enforced hit asked it: a failing store would make each
	// of them wait out its own budget.
	if len(shadow) > 0 && (len(enforced) == 0 || res.Outcome == Allowed) {
		var serr error
		res.Shadow, res.shadowHits, serr = g.shadow(ctx, shadow, record)
		res.gate = g // which Hold needs, for the shadow leases
		if len(enforced) == 0 && len(res.Shadow) == 0 && serr != nil {
			// Nothing counted this request: it went through because the
			// store failed on its shadow limits, which never deny.
			res.Err = serr
			g.m.policy("")[FailedOpen].Inc()
			g.logFailed(time.Now(), FailOpen, FailedOpen, serr)
		}
	}
	return res, nil
}

// decide asks the store about hits and, if the store fails, applies
// their failure modes. It returns an error only when ctx is done or a hit
// is invalid. The decisions report each hit under its Policy.
func (g *Gate) decide(ctx context.Context, hits []Hit, record bool) (Result, error) {
	start := time.Now()
	core := coreHits(hits)
	d, err := ask(ctx, g.e.limiter, core, record)
	g.m.latency.Observe(time.Since(start).Seconds())
	if err == nil {
		rename(&d, hits)
		res := Result{Outcome: Allowed, Decision: d, gate: g, limiter: g.e.limiter, hits: core}
		if !d.Allowed {
			res.Outcome = Denied
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
		return Result{}, err // the caller's input, not the store, is at fault
	}
	g.m.storeError(err)
	return g.failed(ctx, hits, err, record, start), nil
}

// Failed returns what the failure modes of hits decide when the store
// failed with err, without asking it again, counted and logged as any
// degraded decision: for a transport whose earlier call in the same
// request (a peek) found the store failing, so that the request does not
// wait out a second budget. The FailLocal hits are recorded by the local
// limits.
func (g *Gate) Failed(ctx context.Context, hits []Hit, err error) Result {
	var enforced []Hit
	for _, h := range hits {
		if !h.Shadow && h.Failure.valid() {
			h.Key = fitKey(h.Key)
			enforced = append(enforced, h)
		}
	}
	if len(enforced) == 0 {
		return Result{Outcome: Skipped}
	}
	res := g.failed(ctx, enforced, err, true, time.Now())
	g.m.decision(res)
	return res
}

// failed applies the failure modes of hits to the store's error err.
func (g *Gate) failed(ctx context.Context, hits []Hit, err error, record bool, start time.Time) Result {
	res := Result{Outcome: FailedOpen, Err: err} // no hits: nothing counted them
	mode := FailOpen
	var local []Hit
	for _, h := range hits {
		if failureRank[h.Failure] > failureRank[mode] {
			mode = h.Failure
		}
		if h.Failure == FailLocal {
			local = append(local, h)
		}
	}
	switch mode {
	case FailClosed:
		res.Outcome = FailedClosed
	case FailError:
		res.Outcome = Errored
	case FailLocal:
		res.Outcome = FailedClosed // unless the local limits decide
		lcore := coreHits(local)
		if d, lerr := ask(ctx, g.e.local, lcore, record); lerr == nil {
			rename(&d, local)
			res = Result{Outcome: Local, Decision: d, Err: err, gate: g, limiter: g.e.local, hits: lcore}
		}
	}
	g.logFailed(start, mode, res.Outcome, err)
	return res
}

// logFailed logs a decision that the failure mode made because the store
// failed with err, in aggregate (g.log).
func (g *Gate) logFailed(start time.Time, mode FailureMode, outcome Outcome, err error) {
	g.log.do(start, func(held int) { // may run later, from a timer: no request context
		g.e.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: rate-limit store failed; decided by the failure mode",
			slog.String("gate", g.spec.Name), slog.String("failure_mode", mode.String()),
			slog.String("outcome", outcome.String()), slog.Any("error", err), slog.Int("suppressed", held))
	})
}

// coreHits returns the core's hits of hs.
func coreHits(hs []Hit) []floodgate.Hit {
	out := make([]floodgate.Hit, len(hs))
	for i, h := range hs {
		out[i] = h.Hit
	}
	return out
}

// rename reports each decision of d, the decision on hits, under its
// hit's Policy, where one is set.
func rename(d *floodgate.Decision, hits []Hit) {
	top := -1
	for i, h := range hits {
		if d.Each != nil && i < len(d.Each) {
			if top < 0 && d.Each[i].Policy == d.Policy {
				top = i
			}
			if h.Policy != "" {
				d.Each[i].Policy = h.Policy
			}
		}
	}
	switch {
	case d.Each == nil && len(hits) == 1 && hits[0].Policy != "":
		d.Policy = hits[0].Policy
	case top >= 0:
		d.Policy = d.Each[top].Policy
	}
}

// fitKey returns k, or its digest if it is too long for a hit.
func fitKey(k string) string {
	if len(k) <= bounds.KeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// shadow checks each shadow hit on its own, recording it if within its
// limit (and record), and counts and logs what it would have done. A store that fails
// decides nothing more, and counts nothing; an invalid hit is skipped. It
// returns the decisions, the hits they decided, and the store's error if
// it failed (not ctx's).
func (g *Gate) shadow(ctx context.Context, hits []Hit, record bool) ([]floodgate.Decision, []floodgate.Hit, error) {
	out := make([]floodgate.Decision, 0, len(hits))
	checked := make([]floodgate.Hit, 0, len(hits))
	for _, sh := range hits {
		h := sh.Hit
		d, err := ask(ctx, g.e.limiter, []floodgate.Hit{h}, record)
		if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
			continue // the caller's input, not the store, is at fault: a shadow hit never fails a request
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			g.m.storeError(err)
			return out, checked, err // the store failed: the others would wait out their budgets too
		}
		rename(&d, []Hit{sh})
		out = append(out, d)
		checked = append(checked, h)
		g.m.shadowed(d.Policy, d.Allowed)
		if !d.Allowed {
			g.shadowLog.do(time.Now(), func(held int) {
				g.e.logger.LogAttrs(context.Background(), slog.LevelInfo, "floodgate: a shadow limit would have denied a request",
					slog.String("gate", g.spec.Name), slog.String("policy", d.Policy), slog.Duration("retry_after", d.RetryAfter),
					slog.Int("suppressed", held))
			})
		}
	}
	return out, checked, nil
}

// throttles reports whether res is a denial worth waiting for.
func (g *Gate) throttles(res Result) bool {
	return (res.Outcome == Denied || res.Outcome == Local && !res.Decision.Allowed) &&
		(res.Decision.RetryAfter <= g.spec.MaxDelay || leaseDenied(res))
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
	// The first wait may take all of MaxDelay, as throttles allowed; each
	// later one must fit in what is left of it.
	first, deadline := g.spec.MaxDelay, time.Now().Add(g.spec.MaxDelay)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		// Like floodgate.Limiter.Wait: no waiting for quota that comes
		// after the caller stopped listening (a gRPC call's deadline); the
		// denial, with its retry-after, is the better answer now.
		first, deadline = time.Until(d), d
	}
	// A denial by concurrency limits alone waits for a release: one in
	// this process wakes it, another process's is seen by the next check,
	// at most leasePoll later.
	released := g.e.released.wait()
	for left := first; left > 0 && g.throttles(res) && (res.Decision.RetryAfter <= left || leaseDenied(res)); left = time.Until(deadline) {
		wait := res.Decision.RetryAfter
		var wake <-chan struct{}
		if leaseDenied(res) {
			wait, wake = min(wait, leasePoll(g.spec.MaxDelay), left), released
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			g.m.throttled["canceled"].Inc()
			return res, ctx.Err()
		case <-t.C:
		case <-wake:
			t.Stop()
		}
		released = g.e.released.wait() // before the check: no release is missed
		var err error
		if res, err = g.decide(ctx, hits, true); err != nil {
			g.m.throttled["canceled"].Inc()
			return res, err
		}
	}
	if res.Allowed() {
		g.m.throttled["allowed"].Inc()
	} else {
		g.m.throttled["denied"].Inc()
	}
	return res, nil
}

// InForce returns h as a check decides it: its key replaced by its digest
// if longer than 1 MiB, under the rule in force for that
// key, with its problems under that rule (see floodgate.Limiter.InForce):
// for a transport that reports the limit in force before deciding, or
// answers a cost beyond every admission as a denial.
func (e *Enforcer) InForce(h floodgate.Hit) (floodgate.Hit, error) {
	h.Key = fitKey(h.Key)
	return e.limiter.InForce(h)
}
