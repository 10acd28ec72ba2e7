package enforce

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// nilPointer reports whether v holds a nil pointer: a *breakerstore.Store
// variable that was never set, when the store has no breaker.
func nilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// metrics holds the collectors of one Enforcer. They exist even without a
// registerer, so that counting never needs a nil check.
type metrics struct {
	decisions *prometheus.CounterVec   // gate, policy, outcome
	latency   *prometheus.HistogramVec // gate
	errors    *prometheus.CounterVec   // gate, reason
	throttled *prometheus.CounterVec   // gate, result
	waiting   *prometheus.GaugeVec     // gate
	skipped   *prometheus.CounterVec   // gate, policy
	// leases: held now, expired without release, renewals failed (gate,
	// policy)
	leasesHeld     *prometheus.GaugeVec
	leasesExpired  *prometheus.CounterVec
	renewalsFailed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, breaker interface{ State() gobreaker.State }) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Rate-limit decisions by gate (route, method or domain), policy (the one reported; empty when none decided) and outcome (allowed, denied, failed_open, failed_closed, local, skipped; shadow_allowed and shadow_denied for a shadow limit's own check).",
		}, []string{"gate", "policy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Time the rate-limit store took to decide, failures included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"gate"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Decisions the store failed, by reason (timeout, breaker_open, full: a memory store with no key it can reclaim, corrupt_state: one key's state is not the store's, error).",
		}, []string{"gate", "reason"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_throttled_total",
			Help: "Requests that were denied within the gate's MaxDelay, by result: allowed or denied after waiting, rejected (too many waiting), canceled (the client left).",
		}, []string{"gate", "result"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_throttle_waiting",
			Help: "Requests waiting for quota now.",
		}, []string{"gate"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_skipped_limits_total",
			Help: "Limits that skipped a request because it had no key for them, by gate and policy: a per-user limit whose principal is never set limits nobody.",
		}, []string{"gate", "policy"}),
		leasesHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_leases_held",
			Help: "Leases of concurrency limits (requests in flight) held by this process now, by gate and policy.",
		}, []string{"gate", "policy"}),
		leasesExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_leases_expired_total",
			Help: "Leases of concurrency limits whose time to live ran out before their release, by gate and policy: a holder that stalled, or whose renewals failed (a key reset counts so too). A holder that dies is seen by no process.",
		}, []string{"gate", "policy"}),
		renewalsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_lease_renewals_failed_total",
			Help: "Renewals of leases that failed, by gate and policy: the store failed, or the lease had expired (its slot may be another holder's).",
		}, []string{"gate", "policy"}),
	}
	if reg == nil {
		return m, nil
	}
	type named struct {
		name string
		c    prometheus.Collector
	}
	cs := []named{{"floodgate_decisions_total", m.decisions}, {"floodgate_store_duration_seconds", m.latency},
		{"floodgate_store_errors_total", m.errors}, {"floodgate_throttled_total", m.throttled},
		{"floodgate_throttle_waiting", m.waiting}, {"floodgate_skipped_limits_total", m.skipped},
		{"floodgate_leases_held", m.leasesHeld}, {"floodgate_leases_expired_total", m.leasesExpired},
		{"floodgate_lease_renewals_failed_total", m.renewalsFailed}}
	if breaker != nil && !nilPointer(breaker) {
		cs = append(cs, named{"floodgate_breaker_state", prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_breaker_state",
			Help: "State of the store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}, func() float64 { return float64(breaker.State()) })})
	}
	// One error, about the first collector that fails, after taking back
	// those registered before it: a second Enforcer on one registerer fails
	// on all of them alike, and nine copies of one message help nobody.
	for i, c := range cs {
		err := reg.Register(c.c)
		if err == nil {
			continue
		}
		for _, done := range cs[:i] {
			reg.Unregister(done.c)
		}
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("enforce: metric %s is already registered on this Registerer, "+
				"probably by another Enforcer: share one among all routes and methods, "+
				"or give each its own Registerer (prometheus.WrapRegistererWith adds a telling label): %w", c.name, err)
		}
		return nil, fmt.Errorf("enforce: registering metric %s: %w", c.name, err)
	}
	return m, nil
}

// shadowAllowed and shadowDenied index a policy's counters after the
// outcomes.
const (
	shadowAllowed = outcomes + iota
	shadowDenied
	counters
)

// gateMetrics are the collectors of one gate, with its labels bound.
type gateMetrics struct {
	m         *metrics
	name      string
	latency   prometheus.Observer
	errors    map[string]prometheus.Counter // by reason
	throttled map[string]prometheus.Counter // by result
	waiting   prometheus.Gauge
	skipped   []prometheus.Counter // by limit of the Spec
	policies  sync.Map             // policy name -> *[counters]prometheus.Counter
	leases    sync.Map             // policy name -> *leaseMetrics, bound on first use
	// dynamic counts the policies bound on first use (request-borne
	// rules), at most maxPolicyLabels; capped is set once the others go
	// to otherPolicy, and warn tells it once.
	dynamic atomic.Int64
	capped  atomic.Bool
	warn    func()
}

// otherPolicy is the policy label of the request-borne policies past
// maxPolicyLabels: no rule's name, which has no parentheses.
const otherPolicy = "(other)"

func (m *metrics) gate(name string, policies []string) *gateMetrics {
	gm := &gateMetrics{
		m:         m,
		name:      name,
		latency:   m.latency.WithLabelValues(name),
		errors:    make(map[string]prometheus.Counter),
		throttled: make(map[string]prometheus.Counter),
		waiting:   m.waiting.WithLabelValues(name),
	}
	for _, r := range []string{"timeout", "breaker_open", "full", "corrupt_state", "error"} {
		gm.errors[r] = m.errors.WithLabelValues(name, r)
	}
	for _, r := range []string{"allowed", "denied", "rejected", "canceled"} {
		gm.throttled[r] = m.throttled.WithLabelValues(name, r)
	}
	gm.bind("")
	for _, p := range policies {
		gm.bind(p)
		gm.skipped = append(gm.skipped, m.skipped.WithLabelValues(name, p))
	}
	return gm
}

// policy returns the decision counters of policy p: those of the Spec's
// limits are bound when the gate is built, others (rules that come with
// the request) on first use, up to maxPolicyLabels of them; the rest
// share the counters of otherPolicy.
func (gm *gateMetrics) policy(p string) *[counters]prometheus.Counter {
	if cs, ok := gm.policies.Load(p); ok {
		return cs.(*[counters]prometheus.Counter)
	}
	if gm.dynamic.Add(1) > maxPolicyLabels {
		if !gm.capped.Swap(true) && gm.warn != nil {
			gm.warn()
		}
		p = otherPolicy
		if cs, ok := gm.policies.Load(p); ok {
			return cs.(*[counters]prometheus.Counter)
		}
	}
	return gm.bind(p)
}

// bind returns the decision counters of policy p, binding them if new.
func (gm *gateMetrics) bind(p string) *[counters]prometheus.Counter {
	if cs, ok := gm.policies.Load(p); ok {
		return cs.(*[counters]prometheus.Counter)
	}
	var cs [counters]prometheus.Counter
	for o := range Outcome(outcomes) {
		cs[o] = gm.m.decisions.WithLabelValues(gm.name, p, o.String())
	}
	cs[shadowAllowed] = gm.m.decisions.WithLabelValues(gm.name, p, "shadow_allowed")
	cs[shadowDenied] = gm.m.decisions.WithLabelValues(gm.name, p, "shadow_denied")
	got, _ := gm.policies.LoadOrStore(p, &cs)
	return got.(*[counters]prometheus.Counter)
}

func (gm *gateMetrics) decision(res Result) {
	p := ""
	if res.limiter != nil {
		p = res.Decision.Policy
	}
	gm.policy(p)[res.Outcome].Inc()
}

// shadowed counts a shadow limit's own decision.
func (gm *gateMetrics) shadowed(policy string, allowed bool) {
	if allowed {
		gm.policy(policy)[shadowAllowed].Inc()
	} else {
		gm.policy(policy)[shadowDenied].Inc()
	}
}

func (gm *gateMetrics) storeError(err error) {
	reason := "error"
	var open interface{ RetryAfter() time.Duration } // a breakerstore's open breaker
	switch {
	case errors.As(err, &open):
		reason = "breaker_open"
	case errors.Is(err, memstore.ErrFull):
		reason = "full"
	case errors.Is(err, floodgate.ErrCorruptState):
		reason = "corrupt_state"
	case errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	}
	gm.errors[reason].Inc()
}

// leaseMetrics are the lease collectors of one gate and policy.
type leaseMetrics struct {
	held                    prometheus.Gauge
	expired, renewalsFailed prometheus.Counter
}

// lease returns the lease collectors of policy p, bound on first use;
// a policy past maxPolicyLabels shares otherPolicy's, as its decisions
// do.
func (gm *gateMetrics) lease(p string) *leaseMetrics {
	if lm, ok := gm.leases.Load(p); ok {
		return lm.(*leaseMetrics)
	}
	gm.policy(p) // binds p, within maxPolicyLabels
	label := p
	if _, ok := gm.policies.Load(p); !ok {
		label = otherPolicy
	}
	lm := &leaseMetrics{
		held:           gm.m.leasesHeld.WithLabelValues(gm.name, label),
		expired:        gm.m.leasesExpired.WithLabelValues(gm.name, label),
		renewalsFailed: gm.m.renewalsFailed.WithLabelValues(gm.name, label),
	}
	got, _ := gm.leases.LoadOrStore(p, lm)
	return got.(*leaseMetrics)
}
