package rls

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/rlstats"
)

// defaultNearLimitRatio is envoyproxy/ratelimit's default near_limit
// threshold: a hit that takes a limit above floor(80%) of it is near it.
const defaultNearLimitRatio = 0.8

// metrics are the service's own series. The decisions, store errors and
// breaker state are the Enforcer's (floodgate_decisions_total and the
// rest, with the domain as their gate label).
type metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	requests                                                 *prometheus.CounterVec
	unknownDomain, shed                                      prometheus.Counter
	configLoadSuccess, configLoadError, configDropped        prometheus.Counter
	configIgnored                                            prometheus.Gauge

	details    sync.Map     // the descriptor labels in use (detailed_metric), at most maxDetailLabels
	detailSeen atomic.Int64 // how many there are

	ok, overall prometheus.Counter                  // requests answered OK and OVER_LIMIT, bound once
	perLimit    [limitSeries]*prometheus.CounterVec // totalHits ... shadowMode, by their index
	limits      sync.Map                            // limitLabels -> *limitCounters

	// up receives the same counts in envoyproxy/ratelimit's terms
	// (Options.Stats); nil when nobody asked.
	up rlstats.Recorder
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
		nearLimit:   perLimit("near_limit", "Hits that took a limit above floor(limit × NearLimitRatio (0.8 by default)), up to the limit, as envoyproxy/ratelimit's near_limit."),
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
		configDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_config_load_dropped_total",
			Help: "Configurations put in force that dropped a domain, or every limit, of the one before them (each logged at WARN): the requests of a dropped domain are answered OK.",
		}),
		configIgnored: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_ignored_settings",
			Help: "Settings of the configuration in force that have no effect as written (each logged at every load): shadow_mode on a descriptor without a rate_limit, a replaces that names no limit, files of the directory not read.",
		}),
	}
	m.ok, m.overall = m.requests.WithLabelValues("ok"), m.requests.WithLabelValues("over_limit")
	m.perLimit = [limitSeries]*prometheus.CounterVec{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode,
		m.requests, m.unknownDomain, m.shed, m.configLoadSuccess, m.configLoadError, m.configDropped, m.configIgnored} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: register metrics: %w", err)
		}
	}
	return m, nil
}

// counts are what a verdict on n hits adds to its limit's series, as
// envoyproxy/ratelimit counts them (its limiter's base_limiter.go): the
// near threshold is floor(limit × ratio), in float32 as upstream
// computes it; a hit is near when the limit's count after it is above
// the threshold, and of n hits that cross a threshold only those past it
// count (near_limit, and over_limit and shadow_mode past the limit; the
// hits of an over request between the near threshold and the limit are
// near). The count before the hits is the limit less what remained
// (recorded or not: a denied request's hits are as upstream would have
// added them).
func (v verdict) counts(n uint64, nearRatio float64) rlstats.Counts {
	k := rlstats.Counts{TotalHits: n}
	if !v.have {
		return k
	}
	lim := uint64(max(v.dec.Limit, 0))
	used := lim - min(uint64(max(v.dec.Remaining, 0)), lim)
	near := uint64(math.Floor(float64(float32(lim) * float32(nearRatio))))
	if v.dec.Allowed {
		k.WithinLimit = n
		after := used
		before := after - min(n, after)
		switch {
		case after <= near:
		case before >= near:
			k.NearLimit = n
		default:
			k.NearLimit = after - near
		}
		return k
	}
	before, after := used, used+n
	if before >= lim {
		k.OverLimit = n
	} else {
		k.OverLimit = after - lim
		k.NearLimit = lim - max(near, before)
	}
	if v.shadow && !v.limit.QuotaMode { // a quota's excess counts as over alone, as upstream
		k.ShadowMode = k.OverLimit
	}
	return k
}

// upConfigLoad tells Options.Stats of a configuration loaded or refused.
func (m *metrics) upConfigLoad(ok bool) {
	if m.up != nil {
		m.up.ConfigLoad(ok)
	}
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
			k := v.counts(uint64(d.cost), nearRatio)
			for i, x := range [limitSeries]uint64{k.TotalHits, k.OverLimit, k.NearLimit, k.WithinLimit, k.ShadowMode} {
				if x > 0 || i == totalHits {
					c.add(i, float64(x))
				}
			}
			if m.up != nil {
				m.up.Limit(d.match.MetricKey, k)
			}
		}
	}
}
