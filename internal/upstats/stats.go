// Package upstats sends the floodgate service's statistics in
// envoyproxy/ratelimit's names: statsd (USE_STATSD), DogStatsD
// (USE_DOG_STATSD), and the Prometheus series that upstream's statsd
// mapping makes of them (USE_PROMETHEUS), beside floodgate's own
// metrics, read from upstream's variables ([Parse]).
//
// It builds the statistics with the libraries upstream builds them with,
// github.com/lyft/gostats (the store, its scopes, tag serialization,
// flushing and its statsd sink) and github.com/prometheus/statsd_exporter
// (its mapper and exporter), and DogStatsD with DataDog's client: the
// names, tags, line formats and mapped series are theirs, byte for byte,
// rather than a copy of them that could drift. What floodgate adds is the
// counting: package rls counts each request once, for its own series and
// for a [Stats] (an rlstats.Recorder), at the same point.
//
// statsd_exporter is v0.30: v0.31 refuses the timer_type of upstream's
// default and example mappings, which upstream (v0.26) reads, and an
// operator's mapping file was written for those.
//
// The statistics, as upstream's (its src/stats, src/metrics and
// src/server):
//
//	ratelimit.service.rate_limit.KEY.total_hits, .over_limit, .near_limit, .within_limit, .shadow_mode
//	ratelimit.service.rate_limit.DOMAIN.domain_not_found
//	ratelimit.service.call.should_rate_limit.redis_error, .service_error
//	ratelimit.service.config_load_success, .config_load_error
//	ratelimit_server.METHOD.total_requests, ratelimit_server.METHOD.response_time (a timer, in ms)
//	ratelimit.go.* (the Go runtime's gauges)
//
// KEY is the limit's statistics key (rlstats.Recorder.Limit), sanitized
// as upstream does (':' and '|' to '_', the dots of IPv4 addresses to
// '_'); EXTRA_TAGS are on every one.
package upstats

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/internal/rlstats"
)

//go:embed default_mapper.yaml
var defaultMapping string // upstream's src/stats/prom/default_mapper.yaml

// Stats counts and sends the statistics. It is an rlstats.Recorder; its
// methods are safe for concurrent use. Close it when done.
type Stats struct {
	store   gostats.Store
	rl      gostats.Scope // ratelimit.service.rate_limit
	server  gostats.Scope // ratelimit_server
	limits  sync.Map      // key -> *limitStats
	domains sync.Map      // domain -> gostats.Counter (domain_not_found)
	methods sync.Map      // gRPC method -> *methodStats

	configOK, configErr  gostats.Counter
	redisErr, serviceErr gostats.Counter

	cancel  context.CancelFunc
	flushed chan struct{} // closed when the flushing goroutine has flushed for the last time
	closers []func()      // the sinks', after the last flush
}

var _ rlstats.Recorder = (*Stats)(nil)

// limitStats are one statistics key's counters.
type limitStats struct {
	total, over, near, within, shadow gostats.Counter
}

// methodStats are one gRPC method's.
type methodStats struct {
	requests gostats.Counter
	time     gostats.Timer
}

// New starts sending the statistics s asks for: statsd or DogStatsD to
// s.Host:s.Port, each flush interval, and the mapped series registered on
// reg (served with floodgate's metrics). With nothing asked
// (s.Enabled() false) it sends nothing: the caller need not make one.
func New(s Settings, reg prometheus.Registerer, logger *slog.Logger) (*Stats, error) {
	st := &Stats{flushed: make(chan struct{})}
	var sinks []gostats.Sink
	addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	switch {
	case s.DogStatsd:
		// As upstream's godogstats: DataDog's client, without its own
		// aggregation (gostats aggregates), UDP to the address.
		c, err := statsd.New(addr, statsd.WithoutClientSideAggregation())
		if err != nil {
			return nil, fmt.Errorf("upstats: dogstatsd %s: %w", addr, err)
		}
		sinks = append(sinks, &dogSink{client: c, mogrifiers: s.Mogrifiers})
		st.closers = append(st.closers, func() { c.Close() })
	case s.Statsd:
		sink := gostats.NewNetSink(gostats.WithStatsdHost(s.Host), gostats.WithStatsdPort(s.Port),
			gostats.WithStatsdProtocol(s.Protocol), gostats.WithLogger(gostatsLogger{logger}))
		sinks = append(sinks, sink)
	}
	if s.Prometheus {
		p, err := newPromSink(s.Mapping, reg, logger)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, p)
		st.closers = append(st.closers, p.close)
	}
	var sink gostats.Sink = gostats.NewNullSink()
	switch len(sinks) {
	case 1:
		sink = sinks[0]
	case 2:
		sink = multiSink(sinks)
	}
	st.store = gostats.NewStore(sink, false)
	root := st.store.ScopeWithTags("ratelimit", s.ExtraTags)
	service := root.Scope("service")
	st.rl = service.Scope("rate_limit")
	st.configOK = service.NewCounter("config_load_success")
	st.configErr = service.NewCounter("config_load_error")
	call := service.Scope("call.should_rate_limit")
	st.redisErr, st.serviceErr = call.NewCounter("redis_error"), call.NewCounter("service_error")
	st.server = st.store.ScopeWithTags("ratelimit_server", s.ExtraTags)
	st.store.AddStatGenerator(gostats.NewRuntimeStats(root.Scope("go")))

	ctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	ticker := time.NewTicker(s.FlushInterval)
	go func() {
		defer close(st.flushed)
		defer ticker.Stop()
		st.store.StartContext(ctx, ticker) // flushes once more when ctx is done
	}()
	logger.Info("envoyproxy/ratelimit statistics", "statsd", s.Statsd && !s.DogStatsd, "dogstatsd", s.DogStatsd,
		"address", addr, "protocol", s.Protocol, "prometheus", s.Prometheus, "flush_interval", s.FlushInterval)
	return st, nil
}

// Close flushes the statistics one last time (waiting at most 2s for an
// unreachable statsd) and stops.
func (st *Stats) Close() {
	st.cancel()
	select {
	case <-st.flushed:
	case <-time.After(2 * time.Second):
	}
	for _, c := range st.closers {
		c()
	}
}

// ipv4 is upstream's (src/utils): the dots of an address in a statistic's
// name would split it.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitize is upstream's SanitizeStatName.
func sanitize(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// Limit implements rlstats.Recorder.
func (st *Stats) Limit(key string, c rlstats.Counts) {
	v, ok := st.limits.Load(key)
	if !ok {
		k := sanitize(key)
		v, _ = st.limits.LoadOrStore(key, &limitStats{
			total:  st.rl.NewCounter(k + ".total_hits"),
			over:   st.rl.NewCounter(k + ".over_limit"),
			near:   st.rl.NewCounter(k + ".near_limit"),
			within: st.rl.NewCounter(k + ".within_limit"),
			shadow: st.rl.NewCounter(k + ".shadow_mode"),
		})
	}
	l := v.(*limitStats)
	for _, x := range []struct {
		c gostats.Counter
		n uint64
	}{{l.total, c.TotalHits}, {l.over, c.OverLimit}, {l.near, c.NearLimit}, {l.within, c.WithinLimit}, {l.shadow, c.ShadowMode}} {
		if x.n > 0 {
			x.c.Add(x.n)
		}
	}
}

// DomainNotFound implements rlstats.Recorder.
func (st *Stats) DomainNotFound(domain string) {
	v, ok := st.domains.Load(domain)
	if !ok {
		v, _ = st.domains.LoadOrStore(domain, st.rl.NewCounter(sanitize(domain)+".domain_not_found"))
	}
	v.(gostats.Counter).Inc()
}

// ConfigLoad implements rlstats.Recorder.
func (st *Stats) ConfigLoad(ok bool) {
	if ok {
		st.configOK.Inc()
	} else {
		st.configErr.Inc()
	}
}

// CallError implements rlstats.Recorder.
func (st *Stats) CallError(store bool) {
	if store {
		st.redisErr.Inc()
	} else {
		st.serviceErr.Inc()
	}
}

// UnaryServerInterceptor counts every unary gRPC call and times it, as
// upstream's src/metrics does: ratelimit_server.METHOD.total_requests and
// .response_time, in whole milliseconds.
func (st *Stats) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		m := st.method(info.FullMethod)
		m.requests.Inc()
		resp, err := handler(ctx, req)
		m.time.AddValue(float64(time.Since(start).Milliseconds()))
		return resp, err
	}
}

func (st *Stats) method(full string) *methodStats {
	if v, ok := st.methods.Load(full); ok {
		return v.(*methodStats)
	}
	name := "unknown" // upstream's splitMethodName
	if _, m, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/"); ok {
		name = m
	}
	v, _ := st.methods.LoadOrStore(full, &methodStats{
		requests: st.server.NewCounter(name + ".total_requests"),
		time:     st.server.NewTimer(name + ".response_time"),
	})
	return v.(*methodStats)
}

// gostatsLogger puts gostats's sink's complaints (an unreachable statsd)
// in the service's log.
type gostatsLogger struct{ l *slog.Logger }

func (g gostatsLogger) Errorf(msg string, args ...any) {
	g.l.Error("statsd: " + fmt.Sprintf(msg, args...))
}

func (g gostatsLogger) Warnf(msg string, args ...any) {
	g.l.Warn("statsd: " + fmt.Sprintf(msg, args...))
}
