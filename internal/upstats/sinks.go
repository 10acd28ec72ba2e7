package upstats

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// multiSink flushes to each of its sinks: statsd and Prometheus at once,
// which upstream refuses and floodgate can do.
type multiSink []gostats.Sink

func (m multiSink) FlushCounter(name string, v uint64) {
	for _, s := range m {
		s.FlushCounter(name, v)
	}
}

func (m multiSink) FlushGauge(name string, v uint64) {
	for _, s := range m {
		s.FlushGauge(name, v)
	}
}

func (m multiSink) FlushTimer(name string, v float64) {
	for _, s := range m {
		s.FlushTimer(name, v)
	}
}

// Flush flushes the sinks that buffer (gostats's statsd sink).
func (m multiSink) Flush() {
	for _, s := range m {
		if f, ok := s.(gostats.FlushableSink); ok {
			f.Flush()
		}
	}
}

// dogSink is upstream's godogstats sink: gostats's serialized tags
// (NAME.__K=V) become DogStatsD tags (K:V), then the first matching
// mogrifier renames the statistic and adds its tags.
type dogSink struct {
	client     *statsd.Client
	mogrifiers []mogrifier
}

// dogName splits gostats's serialized name into DogStatsD's name and tags.
func (d *dogSink) dogName(name string) (string, []string) {
	short, tagString, hasTags := strings.Cut(name, ".__")
	var tags []string
	if hasTags {
		for _, pair := range strings.Split(tagString, ".__") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				tags = append(tags, k+":"+v)
			}
		}
	}
	short, more := mogrify(d.mogrifiers, short)
	return short, append(tags, more...)
}

func (d *dogSink) FlushCounter(name string, v uint64) {
	n, tags := d.dogName(name)
	d.client.Count(n, int64(v), tags, 1)
}

func (d *dogSink) FlushGauge(name string, v uint64) {
	n, tags := d.dogName(name)
	d.client.Gauge(n, float64(v), tags, 1)
}

func (d *dogSink) FlushTimer(name string, ms float64) {
	n, tags := d.dogName(name)
	d.client.Timing(n, time.Duration(ms)*time.Millisecond, tags, 1)
}

// Flush sends what the client buffered, at the store's flush.
func (d *dogSink) Flush() { d.client.Flush() }

// promSink is upstream's Prometheus sink: each flushed statistic is a
// statsd event handed to statsd_exporter's exporter, which maps it
// (upstream's default mapping, or PROMETHEUS_MAPPER_YAML's) to the series
// it registers.
type promSink struct {
	mu     sync.RWMutex // guards closed, so that no event is sent on a closed channel
	closed bool
	events chan event.Events
	done   chan struct{} // closed when the exporter has stopped
}

func newPromSink(mapping string, reg prometheus.Registerer, logger *slog.Logger) (*promSink, error) {
	m := &mapper.MetricMapper{Registerer: reg, Logger: logger}
	if err := m.InitFromYAMLString(mapping); err != nil {
		return nil, fmt.Errorf("upstats: PROMETHEUS_MAPPER_YAML: %w", err)
	}
	// statsd_exporter's own counters, as upstream registers them.
	eventsActions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_actions_total", Help: "The total number of StatsD events by action."}, []string{"action"})
	eventsUnmapped := prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for."})
	metricsCount := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"})
	conflicting := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_conflict_total", Help: "The total number of StatsD events with conflicting names."}, []string{"type"})
	eventStats := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_total", Help: "The total number of StatsD events seen."}, []string{"type"})
	errorStats := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_error_total", Help: "The total number of StatsD events discarded due to errors."}, []string{"reason"})
	for _, c := range []prometheus.Collector{eventsActions, eventsUnmapped, metricsCount, conflicting, eventStats, errorStats} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("upstats: register statsd_exporter metrics: %w", err)
		}
	}
	exp := exporter.NewExporter(reg, m, logger, eventsActions, eventsUnmapped, errorStats, eventStats, conflicting, metricsCount)
	p := &promSink{events: make(chan event.Events), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		exp.Listen(p.events)
	}()
	return p, nil
}

func (p *promSink) send(e event.Event) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.closed {
		p.events <- event.Events{e}
	}
}

func (p *promSink) FlushCounter(name string, v uint64) {
	p.send(&event.CounterEvent{CMetricName: name, CValue: float64(v), CLabels: map[string]string{}})
}

func (p *promSink) FlushGauge(name string, v uint64) {
	p.send(&event.GaugeEvent{GMetricName: name, GValue: float64(v), GLabels: map[string]string{}})
}

func (p *promSink) FlushTimer(name string, v float64) {
	p.send(&event.ObserverEvent{OMetricName: name, OValue: v, OLabels: map[string]string{}})
}

// close stops the exporter, once what was sent is handled.
func (p *promSink) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.events)
	}
	p.mu.Unlock()
	<-p.done
}
