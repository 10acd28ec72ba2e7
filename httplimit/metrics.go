package httplimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the collectors of one Limiter. They exist even without a
// registerer, so that counting never needs a nil check.
type metrics struct {
	decisions *prometheus.CounterVec   // route, policy, outcome
	latency   *prometheus.HistogramVec // route
	errors    *prometheus.CounterVec   // route, reason
	throttled *prometheus.CounterVec   // route, result
	waiting   *prometheus.GaugeVec     // route
	skipped   *prometheus.CounterVec   // route, policy
}

func newMetrics(reg prometheus.Registerer, breaker *breakerstore.Store) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_decisions_total",
			Help: "Rate-limit decisions by route, policy (the one reported; empty when none decided) and outcome (allowed, denied, failed_open, failed_closed, local, skipped; shadow_allowed and shadow_denied for a shadow limit's own check).",
		}, []string{"route", "policy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_store_duration_seconds",
			Help:    "Time the rate-limit store took to decide, failures included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"route"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Decisions the store failed, by reason (timeout, breaker_open, error).",
		}, []string{"route", "reason"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_throttled_total",
			Help: "Requests that were denied within the route's MaxDelay, by result: allowed or denied after waiting, rejected (too many waiting), canceled (the client left).",
		}, []string{"route", "result"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_http_throttle_waiting",
			Help: "Requests waiting for quota now.",
		}, []string{"route"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_skipped_limits_total",
			Help: "Limits that skipped a request because it had no key for them (Missing: Skip), by route and policy: a per-user limit whose principal is never set limits nobody.",
		}, []string{"route", "policy"}),
	}
	if reg == nil {
		return m, nil
	}
	type named struct {
		name string
		c    prometheus.Collector
	}
	cs := []named{{"floodgate_http_decisions_total", m.decisions}, {"floodgate_store_duration_seconds", m.latency},
		{"floodgate_store_errors_total", m.errors}, {"floodgate_http_throttled_total", m.throttled},
		{"floodgate_http_throttle_waiting", m.waiting}, {"floodgate_http_skipped_limits_total", m.skipped}}
	if breaker != nil {
		cs = append(cs, named{"floodgate_breaker_state", prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_breaker_state",
			Help: "State of the store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}, func() float64 { return float64(breaker.State()) })})
	}
	// One error, about the first collector that fails, after taking back
	// those registered before it: a second Limiter on one registerer fails
	// on all of them alike, and five copies of one message help nobody.
	for i, c := range cs {
		err := reg.Register(c.c)
		if err == nil {
			continue
		}
		for _, done := range cs[:i] {
			reg.Unregister(done.c)
		}
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("httplimit: metric %s is already registered on this Registerer, "+
				"probably by another httplimit.Limiter: share one Limiter among all routes, "+
				"or give each Limiter its own Registerer (prometheus.WrapRegistererWith adds a telling label): %w", c.name, err)
		}
		return nil, fmt.Errorf("httplimit: registering metric %s: %w", c.name, err)
	}
	return m, nil
}

// routeMetrics are the collectors of one route, with its labels bound.
type routeMetrics struct {
	decisions map[string]*[outcomes]prometheus.Counter // by policy
	latency   prometheus.Observer
	errors    map[string]prometheus.Counter // by reason
	throttled map[string]prometheus.Counter // by result
	waiting   prometheus.Gauge
	skipped   []prometheus.Counter              // by limit
	shadow    map[string]*[2]prometheus.Counter // by policy: shadow_allowed, shadow_denied
}

func (m *metrics) route(name string, policies []string) *routeMetrics {
	rm := &routeMetrics{
		decisions: make(map[string]*[outcomes]prometheus.Counter),
		latency:   m.latency.WithLabelValues(name),
		errors:    make(map[string]prometheus.Counter),
		throttled: make(map[string]prometheus.Counter),
		waiting:   m.waiting.WithLabelValues(name),
	}
	for _, p := range append(policies, "") {
		var cs [outcomes]prometheus.Counter
		for o := range cs {
			cs[o] = m.decisions.WithLabelValues(name, p, Outcome(o).String())
		}
		rm.decisions[p] = &cs
	}
	for _, r := range []string{"timeout", "breaker_open", "error"} {
		rm.errors[r] = m.errors.WithLabelValues(name, r)
	}
	for _, r := range []string{"allowed", "denied", "rejected", "canceled"} {
		rm.throttled[r] = m.throttled.WithLabelValues(name, r)
	}
	rm.shadow = make(map[string]*[2]prometheus.Counter)
	for _, p := range policies {
		rm.skipped = append(rm.skipped, m.skipped.WithLabelValues(name, p))
		rm.shadow[p] = &[2]prometheus.Counter{m.decisions.WithLabelValues(name, p, "shadow_allowed"), m.decisions.WithLabelValues(name, p, "shadow_denied")}
	}
	return rm
}

func (rm *routeMetrics) decision(res Result) {
	p := ""
	if res.limiter != nil {
		p = res.Decision.Policy
	}
	if cs := rm.decisions[p]; cs != nil {
		cs[res.Outcome].Inc()
	}
}

// shadowed counts a shadow limit's own decision.
func (rm *routeMetrics) shadowed(policy string, allowed bool) {
	if cs := rm.shadow[policy]; cs != nil {
		if allowed {
			cs[0].Inc()
		} else {
			cs[1].Inc()
		}
	}
}

func (rm *routeMetrics) storeError(err error) {
	reason := "error"
	switch {
	case errors.Is(err, breakerstore.ErrOpen):
		reason = "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	}
	rm.errors[reason].Inc()
}
