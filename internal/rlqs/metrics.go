package rlqs

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's series. The limit label is the limit's
// label (its name, or its descriptor path), never a bucket's values, so
// a hostile Envoy cannot grow the series.
type metrics struct {
	requests    *prometheus.CounterVec // by limit and result (allowed, denied), from the reports
	assigned    *prometheus.CounterVec // by kind
	streams     prometheus.Gauge
	storeErrors prometheus.Counter
	refused     prometheus.Counter
	slowClients prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rlqs_requests_total",
			Help: "Requests that Envoys reported over RLQS, by limit and result (allowed, denied)."}, []string{"limit", "result"}),
		assigned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rlqs_assignments_total",
			Help: "Bucket actions decided, by kind: share (a ledger grant), allow_all, deny_all, abandon, failure_<mode>."}, []string{"kind"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_rlqs_streams",
			Help: "RLQS streams open."}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_store_errors_total",
			Help: "Ledger calls that failed: the assignment in force stays until its TTL, then the limit's failure mode decides."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_buckets_refused_total",
			Help: "Bucket reports ignored: an empty or oversized bucket id, or a stream past 1024 buckets."}),
		slowClients: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_slow_clients_total",
			Help: "Streams ended because the client did not read its assignments within the grace period."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.assigned, m.streams, m.storeErrors, m.refused, m.slowClients} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rlqs: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) reported(limit string, allowed, denied uint64) {
	m.requests.WithLabelValues(limit, "allowed").Add(float64(allowed))
	m.requests.WithLabelValues(limit, "denied").Add(float64(denied))
}
