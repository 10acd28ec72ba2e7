package rls

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// defaultNearLimitRatio is envoyproxy/ratelimit's default near_limit
// threshold: a hit that leaves a limit at least 80% used is near it.
const defaultNearLimitRatio = 0.8

// metrics are the service's own series. The decisions, store errors and
// breaker state are the Enforcer's (floodgate_decisions_total and the
// rest, with the domain as their gate label).
type metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	requests                                                 *prometheus.CounterVec
	unknownDomain, shed                                      prometheus.Counter
	configLoadSuccess, configLoadError                       prometheus.Counter
	configIgnored                                            prometheus.Gauge

	details    sync.Map     // the descriptor labels in use (detailed_metric), at most maxDetailLabels
	detailSeen atomic.Int64 // how many there are

	ok, overall prometheus.Counter                  // requests answered OK and OVER_LIMIT, bound once
	perLimit    [limitSeries]*prometheus.CounterVec // totalHits ... shadowMode, by their index
	limits      sync.Map                            // limitLabels -> *limitCounters
}

// limitLabels are the labels of one limit's series.
type limitLabels struct{ domain, limit, descriptor string }

// limitCounters are one limit's series, each bound on its first use (a
// series appears once counted, as before): a request counts its limits
// without hashing their labels again. There are as many as the labels'
// combinations, which detail bounds.
type limitCounters struct {
	labels limitLabels
	vecs   *[limitSeries]*prometheus.CounterVec
	bound  [limitSeries]atomic.Pointer[prometheus.Counter]
}

// The series of a limit, in metrics.perLimit.
const (
	totalHits = iota
	overLimit
	nearLimit
	withinLimit
	shadowMode
	limitSeries
)

// add adds n to series i.
func (c *limitCounters) add(i int, n float64) {
	p := c.bound[i].Load()
	if p == nil {
		ctr := c.vecs[i].WithLabelValues(c.labels.domain, c.labels.limit, c.labels.descriptor)
		p = &ctr
		c.bound[i].Store(p)
	}
	(*p).Add(n)
}

// limit returns the counters of the labels l.
func (m *metrics) limit(l limitLabels) *limitCounters {
	if c, ok := m.limits.Load(l); ok {
		return c.(*limitCounters)
	}
	got, _ := m.limits.LoadOrStore(l, &limitCounters{labels: l, vecs: &m.perLimit})
	return got.(*limitCounters)
}

// maxDetailLabels bounds the distinct descriptor labels that
// detailed_metric gives the floodgate_rls_* series: each is a request's
// values, so a client could otherwise make series without bound. Past it,
// the values of new descriptors are counted under "(other)".
const maxDetailLabels = 1000

// detail returns the descriptor label of key: key itself while fewer
// than maxDetailLabels are in use, and "(other)" for new ones past that.
func (m *metrics) detail(key string) string {
	if _, ok := m.details.Load(key); ok {
		return key
	}
	if m.detailSeen.Add(1) > maxDetailLabels {
		m.detailSeen.Add(-1)
		return "(other)"
	}
	if _, loaded := m.details.LoadOrStore(key, struct{}{}); loaded {
		m.detailSeen.Add(-1)
	}
	return key
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"domain", "limit", "descriptor"}
	perLimit := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_" + name + "_total",
			Help: help + " Labels: domain, limit (the limit's name, or its descriptor path), descriptor (the request's values, only where detailed_metric asks; else empty).",
		}, labels)
	}
	m := &metrics{
		totalHits:   perLimit("total_hits", "Hits that reached a limit (hits_addend summed), whatever decided them, as envoyproxy/ratelimit's total_hits."),
		overLimit:   perLimit("over_limit", "Hits that a limit evaluated and found over it (recorded or not), as envoyproxy/ratelimit's over_limit."),
		nearLimit:   perLimit("near_limit", "Hits within a limit that left it at least NearLimitRatio (80% by default) used, as envoyproxy/ratelimit's near_limit."),
		withinLimit: perLimit("within_limit", "Hits that a limit evaluated and found within it (recorded or not: a request denied by another limit records nothing), as envoyproxy/ratelimit's within_limit."),
		shadowMode:  perLimit("shadow_mode", "Hits over a shadow_mode limit, let through, as envoyproxy/ratelimit's shadow_mode."),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_requests_total",
			Help: "ShouldRateLimit calls (gRPC and /json) by answer: ok, over_limit, or the gRPC error code (invalid_argument, unavailable, canceled, ...).",
		}, []string{"code"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rls_shed_total",
			Help: "Large requests (descriptors of largeRequest bytes or more) decided by their failure modes without the store, because maxLargeInFlight bytes of them were in flight: calls of Server.ShouldRateLimit from Go; over gRPC and /json, large requests wait for largeBudget first, and are refused past largeWait.",
		}),
		unknownDomain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rls_unknown_domain_total",
			Help: "Requests for a domain that the configuration does not have, answered OK as envoyproxy/ratelimit does.",
		}),
		configLoadSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_load_success_total",
			Help: "Configurations loaded and put in force, the first one included.",
		}),
		configLoadError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_load_error_total",
			Help: "Configurations refused (invalid, or the directory could not be read); the previous one stayed in force.",
		}),
		configIgnored: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_ignored_settings",
			Help: "Settings of the configuration in force that have no effect as written (each logged at every load): shadow_mode on a descriptor without a rate_limit, quota_mode, a replaces that names no limit, files of the directory not read.",
		}),
	}
	m.ok, m.overall = m.requests.WithLabelValues("ok"), m.requests.WithLabelValues("over_limit")
	m.perLimit = [limitSeries]*prometheus.CounterVec{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode,
		m.requests, m.unknownDomain, m.shed, m.configLoadSuccess, m.configLoadError, m.configIgnored} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: register metrics: %w", err)
		}
	}
	return m, nil
}

// count adds the request's hits to the per-limit metrics, each limit by
// its own verdict: every hit to total_hits, and one that its limit
// evaluated (a verdict with figures) to within_limit or over_limit too
// (the package doc's Metrics). Peeks count nothing, as their hits_addend
// is 0.
func (p *plan) count(m *metrics, domain string, nearRatio float64) {
	for _, d := range p.descs {
		if d.peek || len(d.refs) == 0 {
			continue
		}
		detail := ""
		if d.match.DetailedMetric {
			detail = m.detail(d.match.MetricKey)
		}
		for _, v := range d.vs {
			c := m.limit(limitLabels{domain, v.limit.Label, detail})
			n := float64(d.cost)
			c.add(totalHits, n)
			if !v.have {
				continue
			}
			if v.dec.Allowed {
				c.add(withinLimit, n)
				if lim := v.dec.Limit; lim > 0 && float64(lim-v.dec.Remaining) >= nearRatio*float64(lim) {
					c.add(nearLimit, n)
				}
				continue
			}
			c.add(overLimit, n)
			if v.shadow {
				c.add(shadowMode, n)
			}
		}
	}
}
