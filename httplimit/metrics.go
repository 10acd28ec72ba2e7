package httplimit

import (
	"context"
	"errors"

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
}

func newMetrics(reg prometheus.Registerer, breaker *breakerstore.Store) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_decisions_total",
			Help: "Rate-limit decisions by route, policy (the one reported; empty when none decided) and outcome (allowed, denied, failed_open, failed_closed, local, skipped).",
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
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.decisions, m.latency, m.errors, m.throttled, m.waiting}
	if breaker != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_breaker_state",
			Help: "State of the store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}, func() float64 { return float64(breaker.State()) }))
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// routeMetrics are the collectors of one route, with its labels bound.
type routeMetrics struct {
	decisions map[string]*[outcomes]prometheus.Counter // by policy
	latency   prometheus.Observer
	errors    map[string]prometheus.Counter // by reason
	throttled map[string]prometheus.Counter // by result
	waiting   prometheus.Gauge
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
