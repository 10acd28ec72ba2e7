package rls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/internal/rlstats"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// Bounds on one request. A request beyond them is refused with
// InvalidArgument before anything is matched or counted.
const (
	// maxMessageSize bounds a request's encoded size, over gRPC (the
	// server's receive limit, see [Server.GRPCServerOptions]) and as the
	// body of POST /json.
	maxMessageSize = 1 << 20
	// maxDescriptors bounds the descriptors of one request.
	maxDescriptors = 256
	// maxEntries bounds the entries of one descriptor.
	maxEntries = 64
	// largeRequest is the size from which a request is large: in bytes
	// of descriptor keys and values for the decision (maxLargeInFlight),
	// in encoded bytes for its reading and decoding (largeBudget).
	// Envoy's descriptors are a few hundred bytes (a path, an address, a
	// header); a large request is a flood or a misconfiguration.
	largeRequest = 16 << 10
	// maxLargeInFlight bounds the bytes of the large requests decided at
	// once: one 1 MiB request, or a few of tens of KiB. A large request that would exceed it is shed: decided by its
	// descriptors' failure modes without the store (failure_mode error
	// answers Unavailable, closed OVER_LIMIT, open OK, local by the local
	// limits), counted in floodgate_rls_shed_total and logged with the
	// degraded decisions. A request under largeRequest is never shed: one
	// client's flood of large requests cannot crowd out the others'. Over
	// gRPC and /json, a large request holds largeBudget, of the same size,
	// from its decoding to its answer, so none is shed there: this is for
	// the calls of [Server.ShouldRateLimit] from Go.
	maxLargeInFlight = 1 << 20
)

// Bounds on the memory that requests hold, whatever the number of
// connections (issue 34: two connections of 1,000 streams of 1 MiB
// requests took the service to 4 GiB).
const (
	// largeBudget is the one budget of the large requests being decoded
	// and decided: those that decode to largeRequest bytes or more (their
	// encoded bytes, and decodedEntry for each message in them), gRPC
	// messages from the server's codec to the call's end, /json bodies
	// from their first byte read past largeRequest to their answer. One
	// 1 MiB request at a time, or several smaller: a flood of them takes
	// one CPU for its decoding, not every CPU, so the small requests of
	// everyone else are still decided within their budgets. A
	// golang.org/x/sync/semaphore.Weighted (x/sync is in the module graph
	// already, through x/text): first come, first served, so a 1 MiB
	// request is not starved by smaller ones, and a waiter gives up on
	// its context.
	largeBudget = 1 << 20
	// largeWait is how long a large request waits for largeBudget before
	// it is refused: ResourceExhausted over gRPC, 429 with Retry-After on
	// /json. The waiter frees its buffer, and its stream
	// (maxStreamsInFlight).
	largeWait = 100 * time.Millisecond
	// maxStreamsInFlight bounds the gRPC streams open at once over every
	// connection: a stream past it is refused at once with
	// ResourceExhausted. grpc-go reads a whole message, up to
	// maxMessageSize, before the codec sees it, so the codec's budget
	// alone bounds nothing. A call is in flight for its decision's time,
	// under a millisecond with Redis at hand: 512 is 10,000 calls a
	// second at the service's 50 ms decision budget, when Redis is slow.
	maxStreamsInFlight = 512
	// streamReserve is the places of maxStreamsInFlight that only a
	// connection with fewer streams than its share of them may take
	// (streamReserve divided by one more than the connections with
	// streams, so that some are left for a new one): what keeps a few
	// connections' flood from refusing everyone else's calls.
	streamReserve = 128
	// requestTimeout is how long a gRPC call's request may take to
	// arrive (and to be decoded) after its headers: a call still without
	// it is cancelled, and gives its place back. Envoy's calls arrive in
	// a moment; a caller sending none, or a byte at a time, would keep
	// places of maxStreamsInFlight for as long as its connection lasts.
	requestTimeout = 5 * time.Second
	// streamWindow is the HTTP/2 flow-control window of each stream,
	// static (grpc-go's dynamic window grows to 16 MiB): what a stream
	// can buffer beyond the message its call is reading. 64 KiB is the
	// HTTP/2 default and the least grpc-go accepts.
	streamWindow = 64 << 10
	// connWindow is the window of a connection. It bounds no memory
	// (grpc-go returns a connection's window as frames arrive, whether
	// their streams read them or not: the streams' windows bound what
	// waits); it is a static 1 MiB so that one connection carries a
	// 1 MiB request without waiting on a round trip per 64 KiB.
	connWindow = 1 << 20
	// maxHeaderListSize bounds a gRPC call's headers (grpc-go's default
	// is 16 MiB, kept for the call's life). Envoy's calls to a rate-limit
	// service carry a few hundred bytes.
	maxHeaderListSize = 64 << 10
	// decodedEntry is the bytes of a decoded descriptor entry or JSON
	// object beside its strings, at most (97 measured: an entry of a
	// request of maxDescriptors descriptors of maxEntries entries).
	decodedEntry = 100
	// maxDecodedOverhead is what a decoded request can take beyond its
	// strings: maxDescriptors descriptors of maxEntries entries and a
	// limit, which the codec checks before decoding. About 1.6 MiB.
	maxDecodedOverhead = maxDescriptors * (maxEntries + 2) * decodedEntry
	// maxGRPCRequestMemory is what gRPC requests can make the service
	// hold: for each stream admitted, its headers, a message of
	// maxMessageSize and what its window lets arrive beyond it (a
	// message that decodes to less than largeRequest is decoded outside
	// the budget, within that); and within largeBudget, the requests
	// decoded and the proto codec's copy of their message, or one that
	// decodes to more than the budget (which it takes whole): 2 copies of
	// maxMessageSize and maxDecodedOverhead. About 580 MiB.
	maxGRPCRequestMemory = maxStreamsInFlight*(maxHeaderListSize+maxMessageSize+streamWindow) +
		2*maxMessageSize + maxDecodedOverhead
	// maxJSONRequestMemory is what /json bodies can make the service
	// hold: for each connection of the HTTP listener (which cmd/floodgate
	// caps at maxHTTPConns: an assumption of this bound) a small body
	// read and decoded outside the budget (under largeRequest, decoding
	// to under largeRequest: jsonWeight), with protojson's copy; and
	// within largeBudget one large body (2 copies, and
	// maxDecodedOverhead) or smaller ones. About 50 MiB.
	maxJSONRequestMemory = maxHTTPConns*3*largeRequest + 2*maxMessageSize + maxDecodedOverhead
	// maxHTTPConns is the connections of the HTTP listener, which
	// cmd/floodgate caps.
	maxHTTPConns = 1000
)

// ErrShed is the error of a large request (16 KiB or more) shed because
// 1 MiB of them are already being decided: what its descriptors' failure
// modes decide. A large request that waited longer than largeWait to be
// decoded is not shed but refused: ResourceExhausted, 429 on /json.
var ErrShed = errors.New("rls: request shed: too many large requests in flight")

// ErrInvalidOptions is wrapped by the errors of [New].
var ErrInvalidOptions = errors.New("rls: invalid options")

// Options configures a [Server]. Enforcer and one of ConfigDir and Config
// are required; every other field has a default.
type Options struct {
	// Enforcer decides the hits: its Limiter's store and time budget, its
	// local fallback, breaker, metrics and logs. The Server logs its
	// configuration's loads, refusals and warnings to the Enforcer's
	// logger too (enforce.Options.Logger). The Server does not close it.
	Enforcer *enforce.Enforcer
	// ConfigDir is a directory of envoyproxy/ratelimit YAML files, read
	// at New and watched for changes (see [rlconfig.Watcher]).
	ConfigDir string
	// Config is a fixed configuration, used when ConfigDir is empty.
	Config *rlconfig.Config
	// ConfigOptions are the parse options of every load of ConfigDir.
	ConfigOptions rlconfig.Options
	// Registerer receives the service's metrics. Nil means a registry of
	// the Server's own, which Gatherer then defaults to.
	Registerer prometheus.Registerer
	// Gatherer is what GET /metrics serves. Nil means the Registerer when
	// it is also a Gatherer (a *prometheus.Registry), else nothing.
	Gatherer prometheus.Gatherer
	// ShadowMode puts every limit in shadow mode, as
	// envoyproxy/ratelimit's SHADOW_MODE does: the limits are counted and
	// reported in the metrics, and never deny. A request's own limit
	// override (a descriptor's limit) too: upstream answers OK whatever
	// any limit says.
	ShadowMode bool
	// CountOverLimit counts every hit, even past its limit, in the
	// domains whose configuration does not say (rlconfig's
	// count_over_limit): as envoyproxy/ratelimit counts by default
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false). A denied request
	// then extends its denial, a charge sent after the response (Envoy
	// Gateway's rate limiting with cost: hits_addend N at the stream's
	// end) is recorded in full, the key owing what it took past its limit
	// (at most its capacity: floodgate.Hit.Overdraw), and a check
	// (hits_addend 0) is over only when the key is strictly past its
	// limit. False, floodgate's default, counts only what is admitted.
	CountOverLimit bool
	// AllowEmptyConfig lets a reload of ConfigDir that finds no file put
	// in force a configuration of no limit, every request answered OK.
	// By default such a reload is refused and counted in
	// floodgate_config_load_error_total, and the configuration in force
	// stays (rlconfig.WatchOptions.AllowEmpty says why). A reload that
	// drops a domain, or every limit, is logged at WARN and counted in
	// floodgate_config_load_dropped_total either way.
	AllowEmptyConfig bool
	// NearLimitRatio is the share of a limit past which a hit counts as
	// near it (floodgate_rls_near_limit_total): a hit that takes the
	// limit above floor(limit × ratio), as envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO: above 0, at most 1. Zero means 0.8.
	NearLimitRatio float64
	// QuotaMode puts every limit not in shadow mode in quota mode, as
	// envoyproxy/ratelimit's QUOTA_MODE does; a limit's own quota_mode
	// puts it alone. A limit in quota mode never denies: past its limit,
	// its descriptor's status says OK with its current_limit and
	// limit_remaining and no duration_until_reset, the hit counts in
	// over_limit (not shadow_mode), and the descriptor is listed in the
	// dynamic metadata's quotaModeViolations.
	QuotaMode bool
	// DynamicMetadata sets each response's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// each descriptor's entries ("key=value"), limit override and
	// hits_addend, the request's hits_addend, the indices of the
	// descriptors over a limit in quota mode (quotaModeViolations) and
	// whether any limit of the request is in quota mode
	// (quotaModeEnabled).
	DynamicMetadata bool
	// Headers are the headers each response asks Envoy to add to the
	// client's response (response_headers_to_add). The zero value adds
	// none, as envoyproxy/ratelimit by default.
	Headers Headers
	// Stats, if set, receives the requests' counts and the
	// configuration's loads in envoyproxy/ratelimit's terms, counted
	// where the Server's own series are: the floodgate command sends them
	// as statsd. Leave it nil.
	Stats rlstats.Recorder

	// debounce is the Watcher's quiet time before a reload; zero means
	// the package doc's 100ms. The tests set it (export_test.go).
	debounce time.Duration
}

// Headers says which headers a response carries in
// response_headers_to_add, for Envoy to add to the client's response.
type Headers struct {
	// Draft adds the draft-ietf-httpapi-ratelimit-headers-11 fields
	// RateLimit-Policy and RateLimit, one member per enforced limit
	// ("name";q=10;w=60 and "name";r=7;t=42), and Retry-After when the
	// answer is OVER_LIMIT.
	Draft bool
	// Limit, Remaining and Reset name the headers that
	// envoyproxy/ratelimit adds under LIMIT_RESPONSE_HEADERS_ENABLED
	// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER;
	// upstream's names are RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset): the requests_per_unit, limit_remaining and
	// duration_until_reset's seconds of one status, picked as upstream
	// picks it: the last one over its limit, else the first with the
	// least remaining. Set all three, or none for no such headers.
	Limit, Remaining, Reset string
}

// validate lists what is wrong with h.
func (h Headers) validate() []error {
	var errs []error
	names := []struct{ field, v string }{{"Limit", h.Limit}, {"Remaining", h.Remaining}, {"Reset", h.Reset}}
	set := h.Limit != "" || h.Remaining != "" || h.Reset != ""
	for _, n := range names {
		switch {
		case n.v == "" && set:
			errs = append(errs, fmt.Errorf("%w: Headers.%s is empty beside the others: set all three or none", ErrInvalidOptions, n.field))
		case n.v != "" && !httpguts.ValidHeaderFieldName(n.v):
			errs = append(errs, fmt.Errorf("%w: Headers.%s %q is not a header name", ErrInvalidOptions, n.field, n.v))
		}
	}
	return errs
}

// Server is the Envoy RLS v3 rate-limit service: it matches each
// request's descriptors against the configuration in force and decides
// them all-or-nothing through an [enforce.Enforcer]. It implements
// rlsv3.RateLimitServiceServer; [Server.Register] puts it, the gRPC
// health service on a grpc.Server, and [Server.Handler]
// serves the same over HTTP. Its methods are safe for concurrent use.
// Close it when done.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	enf      *enforce.Enforcer
	logger   *slog.Logger
	watcher  *rlconfig.Watcher               // nil without ConfigDir
	fixed    atomic.Pointer[rlconfig.Config] // the Config, or the last Applied, without ConfigDir
	reported atomic.Pointer[rlconfig.Config] // the configuration last logged in force: what a reload dropped is against it
	shadow   bool                            // Options.ShadowMode
	over     bool                            // Options.CountOverLimit
	near     float64                         // Options.NearLimitRatio, or its default
	headers  Headers                         // Options.Headers
	quota    bool                            // Options.QuotaMode
	metadata bool                            // Options.DynamicMetadata
	metrics  *metrics
	gather   prometheus.Gatherer
	health   *health.Server
	closing  atomic.Bool
	drained  chan struct{} // closed by Close: health watches end
	large    atomic.Int64  // the bytes of the large requests in flight
	decoding heldBudget    // largeBudget: the large requests being decoded, then decided
	drain    sync.Once
	plans    sync.Pool // *plan: the working memory of the requests

	admission admission // the gRPC streams admitted, at most maxStreamsInFlight

	mu    sync.RWMutex
	gates map[string]*enforce.Gate // guarded by mu; one per domain ever seen in a configuration
}

// New returns a Server for opts. With ConfigDir, it loads the directory
// and starts watching it; an invalid configuration is an error that lists
// every problem (it wraps [rlconfig.ErrInvalidConfig]).
func New(opts Options) (*Server, error) {
	var errs []error
	if opts.Enforcer == nil {
		errs = append(errs, fmt.Errorf("%w: Enforcer is required", ErrInvalidOptions))
	}
	if opts.ConfigDir == "" && opts.Config == nil {
		errs = append(errs, fmt.Errorf("%w: set ConfigDir or Config", ErrInvalidOptions))
	}
	if opts.ConfigDir != "" && opts.Config != nil {
		errs = append(errs, fmt.Errorf("%w: set ConfigDir or Config, not both", ErrInvalidOptions))
	}
	if st, err := os.Stat(opts.ConfigDir); opts.ConfigDir != "" && err == nil && !st.IsDir() {
		// rlconfig.Watch would watch the one file; the service reads a
		// directory, as envoyproxy/ratelimit does.
		errs = append(errs, fmt.Errorf("%w: ConfigDir %s is not a directory", ErrInvalidOptions, opts.ConfigDir))
	}
	if r := opts.NearLimitRatio; !(r >= 0 && r <= 1) {
		errs = append(errs, fmt.Errorf("%w: NearLimitRatio %v is not above 0 and at most 1", ErrInvalidOptions, r))
	}
	errs = append(errs, opts.Headers.validate()...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reg, gather := opts.Registerer, opts.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg = r
		if gather == nil {
			gather = r
		}
	}
	if gather == nil {
		gather, _ = reg.(prometheus.Gatherer)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.up = opts.Stats
	logger := opts.Enforcer.Logger()
	s := &Server{enf: opts.Enforcer, logger: logger, shadow: opts.ShadowMode, over: opts.CountOverLimit, near: cmp.Or(opts.NearLimitRatio, defaultNearLimitRatio), headers: opts.Headers, quota: opts.QuotaMode, metadata: opts.DynamicMetadata, metrics: m, gather: gather,
		health: health.NewServer(), drained: make(chan struct{}), gates: map[string]*enforce.Gate{}}
	s.decoding = heldBudget{sem: semaphore.NewWeighted(largeBudget), by: map[*rlsv3.RateLimitRequest]int64{}}
	s.admission.held = &s.decoding
	s.admission.requestTimeout.Store(int64(requestTimeout))
	s.plans.New = func() any { return new(plan) }
	s.admission.refused = m.requests.WithLabelValues("resource_exhausted").Inc
	s.fixed.Store(opts.Config)
	if opts.ConfigDir != "" {
		w, err := rlconfig.Watch(opts.ConfigDir, rlconfig.WatchOptions{
			Options:    opts.ConfigOptions,
			Debounce:   opts.debounce,
			OnReload:   s.reloaded,
			AllowEmpty: opts.AllowEmptyConfig,
		})
		if err != nil {
			m.configLoadError.Inc()
			m.upConfigLoad(false)
			return nil, err
		}
		s.watcher = w
	}
	cfg := s.Config()
	s.reported.Store(cfg)
	if s.watcher == nil && len(cfg.Files()) == 0 {
		// A fixed Config of no file is a placeholder (the xDS mode's,
		// before its first configuration): nothing was loaded.
		logger.Info("no rate-limit configuration yet: every domain is unknown until one is applied")
	} else {
		m.configLoadSuccess.Inc()
		m.upConfigLoad(true)
		logger.Info("rate-limit configuration loaded", "domains", cfg.Domains(), "limits", len((*rlmatch.Config)(cfg).Limits()), "files", len(cfg.Files()))
		s.warnConfig(cfg)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	// The name envoyproxy/ratelimit serves its health under: the probes
	// and Envoy health checks of a switching deployment ask for it.
	s.health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// reloaded logs and counts a reload that the Watcher attempted.
func (s *Server) reloaded(cfg *rlconfig.Config, err error) {
	if err != nil {
		s.metrics.configLoadError.Inc()
		s.metrics.upConfigLoad(false)
		if errors.Is(err, rlconfig.ErrEmptyConfig) {
			s.logger.Error("rate-limit configuration refused: the directory holds no configuration file, and putting that in force "+
				"would answer every request OK; the previous one stays in force (rls.Options.AllowEmptyConfig allows it)", "err", err)
			return
		}
		s.logger.Error("rate-limit configuration refused; the previous one stays in force", "err", err)
		return
	}
	s.metrics.configLoadSuccess.Inc()
	s.metrics.upConfigLoad(true)
	limits := len((*rlmatch.Config)(cfg).Limits())
	s.logger.Info("rate-limit configuration reloaded", "domains", cfg.Domains(), "limits", limits, "files", len(cfg.Files()))
	if prev := s.reported.Swap(cfg); prev != nil {
		before := len((*rlmatch.Config)(prev).Limits())
		gone := dropped(prev.Domains(), cfg.Domains())
		if len(gone) > 0 || before > 0 && limits == 0 {
			s.metrics.configDropped.Inc()
			s.logger.Warn("the rate-limit configuration reloaded drops limits that were in force: the requests of a dropped domain are answered OK",
				"dropped_domains", gone, "limits_before", before, "limits", limits, "files", len(cfg.Files()))
		}
	}
	s.warnConfig(cfg)
}

// dropped returns the domains of before that after does not have, in
// before's order.
func dropped(before, after []string) []string {
	kept := make(map[string]bool, len(after))
	for _, d := range after {
		kept[d] = true
	}
	var gone []string
	for _, d := range before {
		if !kept[d] {
			gone = append(gone, d)
		}
	}
	return gone
}

// warnConfig logs what of the configuration envoyproxy/ratelimit would
// apply and the Server does not: what the directory holds and was not
// read; and what does nothing there either: a replaces that names no limit,
// shadow_mode on a descriptor without a rate_limit. It counts them all
// in floodgate_config_ignored_settings.
func (s *Server) warnConfig(cfg *rlconfig.Config) {
	if sk := cfg.Skipped(); len(sk) > 0 {
		s.logger.Warn("entries of the configuration directory not read: floodgate reads the *.yaml and *.yml files at its top level, "+
			"where envoyproxy/ratelimit reads every file, subdirectories included; rename or move them to apply their limits", "skipped", sk)
	}
	var dangling []string
	named := map[string]bool{}
	for _, l := range (*rlmatch.Config)(cfg).Limits() {
		if l.Name != "" {
			named[l.Name] = true
		}
	}
	for _, l := range (*rlmatch.Config)(cfg).Limits() {
		for _, r := range l.Replaces {
			if !named[r] {
				dangling = append(dangling, l.Label+" replaces "+strconv.Quote(r))
			}
		}
	}
	if len(dangling) > 0 {
		s.logger.Warn("a replaces names no limit of the configuration, and replaces nothing", "replaces", dangling)
	}
	ignored := cfg.Ignored()
	for _, ig := range ignored {
		s.logger.Warn("a setting of the configuration has no effect", "setting", ig)
	}
	s.metrics.configIgnored.Set(float64(len(cfg.Skipped()) + len(dangling) + len(ignored)))
}

// Config returns the configuration in force. A request reads it once, so
// no request sees half of a reload.
func (s *Server) Config() *rlconfig.Config {
	if s.watcher != nil {
		return s.watcher.Config()
	}
	return s.fixed.Load()
}

// ErrWatching is returned by [Server.Apply] on a Server that watches a
// ConfigDir: its next reload would undo the configuration applied.
var ErrWatching = errors.New("rls: the Server follows its ConfigDir")

// Apply puts cfg in force, as a reload of ConfigDir would, and logs and
// counts it as one (warning of what it does not apply): for a
// configuration that comes from elsewhere than files, such as an xDS
// server (package internal/xds). A request reads the
// configuration once, so none sees half of two. It fails with
// [ErrWatching] on a Server built with ConfigDir.
func (s *Server) Apply(cfg *rlconfig.Config) error {
	if s.watcher != nil {
		return ErrWatching
	}
	if cfg == nil {
		return fmt.Errorf("%w: Apply of a nil Config", ErrInvalidOptions)
	}
	s.fixed.Store(cfg)
	s.reloaded(cfg, nil)
	return nil
}

// gate returns the enforcement gate of domain, made on first use. Its
// name is the "gate" label of the Enforcer's metrics.
func (s *Server) gate(domain string) (*enforce.Gate, error) {
	s.mu.RLock()
	g, ok := s.gates[domain]
	s.mu.RUnlock()
	if ok {
		return g, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.gates[domain]; ok {
		return g, nil
	}
	g, err := s.enf.Gate(enforce.Spec{Name: gateName(domain)})
	if err != nil {
		return nil, err
	}
	s.gates[domain] = g
	return g, nil
}

// gateName turns a domain into a gate name (the "gate" label): up to 128
// bytes of A-Z a-z 0-9 _ . - + /, any other byte written as "_".
func gateName(domain string) string {
	b := []byte(domain[:min(len(domain), bounds.GateNameLen)])
	for i, c := range b {
		if !bounds.GateNameByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// Register registers the rate-limit service and the standard gRPC health
// service on g. Server reflection, which lists them to any caller, is the
// caller's to add (the service's GRPC_REFLECTION).
func (s *Server) Register(g *grpc.Server) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, healthService{s.health, s.drained})
}

// healthService is the standard health service, whose Watch streams end
// once the Server is shut down: a stream never ends by itself, and
// grpc.Server.GracefulStop waits for every stream.
type healthService struct {
	*health.Server
	drained <-chan struct{}
}

// Watch streams the status of req's service until the client leaves or
// the Server is shut down; then it sends the last status (NOT_SERVING)
// and ends.
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.drained:
			cancel()
		case <-ctx.Done():
		}
	}()
	ws := &watchStream{Health_WatchServer: stream, ctx: ctx, last: -1}
	err := h.Server.Watch(req, ws)
	select {
	case <-h.drained:
		if stream.Context().Err() != nil {
			return err
		}
		// The inner Watch has returned, so no other Send runs: send the
		// status at shutdown unless it was the last one sent.
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if res, err := h.Server.Check(stream.Context(), req); err == nil {
			st = res.GetStatus()
		}
		if st == ws.last {
			return nil
		}
		return stream.Send(&healthpb.HealthCheckResponse{Status: st})
	default:
		return err
	}
}

// watchStream is a Watch stream whose context ends at shutdown, and which
// remembers the last status sent.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	last healthpb.HealthCheckResponse_ServingStatus // -1 before any
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(res *healthpb.HealthCheckResponse) error {
	w.last = res.GetStatus()
	return w.Health_WatchServer.Send(res)
}

// Bounds on a caller's connections, which the grpc.Server of
// [Server.GRPCServerOptions] enforces.
const (
	// maxConcurrentStreams bounds the calls and streams open at once on
	// one connection: an Envoy multiplexes every user's checks over a few
	// connections, so it is sized for a busy one (a thousand checks in
	// flight on one connection), while 10,000 health Watch streams on one
	// connection wait for a slot instead of holding memory.
	maxConcurrentStreams = 1024
	// minPingInterval is the shortest keepalive ping interval a client
	// may use; a client pinging faster is disconnected.
	minPingInterval = 10 * time.Second
)

// GRPCServerOptions returns the options a grpc.Server for this service
// should have: a receive limit of 1 MiB, headers of 64 KiB, at most 1024
// streams per connection and 512 over every connection (a stream past
// them is refused at once with ResourceExhausted; 128 are kept for the
// connections under their share), static 64 KiB stream windows,
// keepalive pings no more often than every 10s (with or without streams
// open, as Envoy's keepalive may ping an idle connection), and a codec
// that decodes the large requests (that decode to 16 KiB or more) within
// a budget of 1 MiB at once, which they hold until their call ends: a
// flood of them takes one CPU for its decoding, not every CPU, so the
// small requests of everyone else are still decided within their
// budgets, and one that waits more than 100 ms for its turn is refused
// with ResourceExhausted. Together they bound what gRPC requests can make
// the service hold, whatever the number of connections
// (maxGRPCRequestMemory, docs/SERVICE.md's Security). The options work
// together (the tap, the stats handler and the codec): use them all.
// Calls are served by streamWorkers goroutines that live on (a call
// past them gets a goroutine of its own): a goroutine per call grew its
// stack on every call, which took a sixth of the service's CPU
// (runtime.morestack in BENCHMARKS.md's profile).
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(budgetCodec{CodecV2: encoding.GetCodecV2(proto.Name), held: &s.decoding}),
		grpc.MaxRecvMsgSize(maxMessageSize),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.InTapHandle(s.admission.admit),
		grpc.StatsHandler(&s.admission),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
	}
}

// streamWorkers is how many goroutines serve gRPC calls and keep their
// grown stacks between calls (grpc.NumStreamWorkers): more than the
// calls a busy service has in flight while it waits on Redis (64
// callers over 4 connections, in bench-rls.sh, keep about 50 in flight),
// each holding the stack its calls grew (16 to 32 KiB) until the
// collector shrinks it: 3 MB more resident memory in bench-rls.sh.
const streamWorkers = 128

// admission counts the gRPC streams admitted, over every connection
// (maxStreamsInFlight): it is the server's tap (admit) and the
// stats.Handler that gives a stream's place back with its call.
type admission struct {
	shared  atomic.Int64 // streams in the places any connection may take
	reserve atomic.Int64 // streams in the streamReserve
	active  atomic.Int64 // connections with a stream admitted
	refused func()       // counts a refused ShouldRateLimit
	held    *heldBudget  // what the calls' requests hold of largeBudget
	// requestTimeout is requestTimeout; the tests shorten it.
	requestTimeout atomic.Int64
}

// admit is the server's tap: it admits a stream while fewer than
// maxStreamsInFlight-streamReserve are, or into the streamReserve while
// its connection has fewer than its share of the reserve (divided by
// one more than the connections with streams), and refuses it at once with
// ResourceExhausted otherwise: a few connections' flood of large requests
// does not keep the other connections' requests out. A call whose
// request has not arrived within requestTimeout is cancelled. It runs on
// the connection's reader goroutine, so it never waits.
func (a *admission) admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	conn, ok := ctx.Value(connStreamsKey{}).(*atomic.Int64)
	if !ok {
		conn = new(atomic.Int64) // not a connection that TagConn tagged
	}
	t := &streamTurn{a: a, conn: conn, pool: &a.shared}
	if a.shared.Add(1) > maxStreamsInFlight-streamReserve {
		a.shared.Add(-1)
		if conn.Load() >= max(1, streamReserve/(a.active.Load()+1)) {
			return nil, a.refuse(info)
		}
		if a.reserve.Add(1) > streamReserve {
			a.reserve.Add(-1)
			return nil, a.refuse(info)
		}
		t.pool = &a.reserve
	}
	if conn.Add(1) == 1 {
		a.active.Add(1)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.late = time.AfterFunc(time.Duration(a.requestTimeout.Load()), cancel)
	context.AfterFunc(ctx, func() {
		t.late.Stop()
		t.end(turnAdmitted)
	})
	return context.WithValue(ctx, streamTurnKey{}, t), nil
}

func (a *admission) refuse(info *tap.Info) error {
	if info.FullMethodName == rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
		a.refused()
	}
	return status.Errorf(codes.ResourceExhausted, "rls: too many calls in flight (at most %d; the last %d are kept for connections with few calls)", maxStreamsInFlight, streamReserve)
}

// A streamTurn is a stream's place among the maxStreamsInFlight: given
// back once, when the stream has ended (its context) if no handler took
// it, else when the handler's call ended (stats.End), which may be after
// the stream (a client that cancels does not free the place of a
// message still being decoded).
type streamTurn struct {
	state atomic.Int32            // turnAdmitted, turnHandled, turnEnded
	req   *rlsv3.RateLimitRequest // the call's request (stats.InPayload), which may hold some of largeBudget
	late  *time.Timer             // cancels the call if its request has not arrived within requestTimeout
	a     *admission
	conn  *atomic.Int64 // its connection's streams
	pool  *atomic.Int64 // admission.shared or admission.reserve
}

const (
	turnAdmitted = iota
	turnHandled
	turnEnded
)

// end gives the turn back if it is in state from.
func (t *streamTurn) end(from int32) {
	if !t.state.CompareAndSwap(from, turnEnded) {
		return
	}
	t.pool.Add(-1)
	if t.conn.Add(-1) == 0 {
		t.a.active.Add(-1)
	}
}

type (
	streamTurnKey  struct{}
	connStreamsKey struct{}
)

// TagConn gives the connection its count of streams admitted.
func (*admission) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connStreamsKey{}, new(atomic.Int64))
}

func (*admission) HandleConn(context.Context, stats.ConnStats) {}

func (*admission) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC ends a call's streamTurn with the call, and gives back what
// its request holds of largeBudget. They run on the call's goroutine, in
// order: Begin, InPayload (once the request is decoded), End.
func (a *admission) HandleRPC(ctx context.Context, st stats.RPCStats) {
	t, ok := ctx.Value(streamTurnKey{}).(*streamTurn)
	if !ok {
		return
	}
	switch st := st.(type) {
	case *stats.Begin:
		t.state.CompareAndSwap(turnAdmitted, turnHandled)
	case *stats.InPayload:
		t.late.Stop()
		if req, ok := st.Payload.(*rlsv3.RateLimitRequest); ok {
			t.req = req
		}
	case *stats.End:
		if t.req != nil {
			a.held.release(t.req)
		}
		t.end(turnHandled)
	}
}

// Close marks the service as not serving (health checks and /healthcheck
// fail, so load balancers drain it) and stops watching the configuration
// directory, without refusing requests: they still answer, with the
// configuration last in force. Call it before stopping the servers
// gracefully. Close is idempotent.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.health.Shutdown()
	s.drain.Do(func() { close(s.drained) })
	if s.watcher != nil {
		return s.watcher.Close()
	}
	return nil
}

// budgetCodec is the proto codec, decoding within the Server's
// largeBudget the messages that decode to largeRequest bytes or more
// (requestScan.weight), after a wait of largeWait at most. A RateLimitRequest
// holds its share of the budget until its call ends (held), as its
// decoded form lives until then; any other message gives it back once
// decoded. A RateLimitRequest it refuses is left with a domain that no
// decoded request has (refusedDomain: proto3 strings are UTF-8), and its
// handler answers with the reason: gRPC would turn the codec's error
// into Internal. It refuses a RateLimitRequest of more than
// maxDescriptors descriptors, or maxEntries entries in one, before
// decoding it: 2 bytes of an empty entry decode to about 100, so a 1 MiB
// request could otherwise take 50 MiB.
type budgetCodec struct {
	encoding.CodecV2
	held *heldBudget
}

func (c budgetCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, isRLS := v.(*rlsv3.RateLimitRequest)
	weight := int64(data.Len())
	if isRLS && weight >= 2*(maxEntries+1) { // else too short to decode to largeRequest
		sc, ok := scanRequest(data)
		if why := sc.tooMany(); ok && why != "" {
			refuse(req, refusedInvalid, why)
			return nil
		}
		weight = sc.weight(data.Len(), ok)
	}
	if weight < largeRequest {
		return c.CodecV2.Unmarshal(data, v)
	}
	weight = min(weight, largeBudget) // what decodes to more takes the whole budget
	ctx, cancel := context.WithTimeout(context.Background(), largeWait)
	err := c.held.sem.Acquire(ctx, weight)
	cancel()
	if err != nil {
		if isRLS {
			refuse(req, refusedBusy, "rls: large requests (16 KiB or more) are waiting to be decoded: try again")
			return nil
		}
		return status.Error(codes.ResourceExhausted, "rls: large requests are waiting to be decoded")
	}
	if err := c.CodecV2.Unmarshal(data, v); err != nil || !isRLS {
		c.held.sem.Release(weight)
		return err
	}
	c.held.add(req, weight)
	return nil
}

// heldBudget is largeBudget, and the share of it that each decoded
// RateLimitRequest holds until its call ends: admission gives it back at
// the call's stats.End, having seen the request in its stats.InPayload.
type heldBudget struct {
	sem *semaphore.Weighted
	mu  sync.Mutex
	by  map[*rlsv3.RateLimitRequest]int64 // guarded by mu
}

func (h *heldBudget) add(req *rlsv3.RateLimitRequest, n int64) {
	h.mu.Lock()
	h.by[req] += n // a second message of the call decodes into the same request
	h.mu.Unlock()
}

// release gives back what req holds.
func (h *heldBudget) release(req *rlsv3.RateLimitRequest) {
	h.mu.Lock()
	n, ok := h.by[req]
	delete(h.by, req)
	h.mu.Unlock()
	if ok {
		h.sem.Release(n)
	}
}

// requestScan is what scanRequest counts of an encoded RateLimitRequest.
type requestScan struct {
	descriptors int
	objects     int // the messages in it: descriptors, entries, limits
	over        int // the first descriptor of more than maxEntries entries, or -1
	overEntries int
}

// tooMany says why the request has more than maxDescriptors descriptors
// or more than maxEntries entries in a descriptor, as requestEntries
// would of a request otherwise valid, or returns "".
func (sc requestScan) tooMany() string {
	switch {
	case sc.descriptors > maxDescriptors:
		return fmt.Sprintf("rls: %d descriptors, at most %d allowed", sc.descriptors, maxDescriptors)
	case sc.over >= 0:
		return fmt.Sprintf("rls: descriptor %d has %d entries, at most %d allowed", sc.over, sc.overEntries, maxEntries)
	}
	return ""
}

// weight is what a request of n bytes decodes to at most: its strings
// and decodedEntry bytes per message in it; for one that could not be
// scanned (ok false), a message in every 2 bytes.
func (sc requestScan) weight(n int, ok bool) int64 {
	if !ok {
		sc.objects = n / 2
	}
	return int64(n) + int64(sc.objects+1)*decodedEntry
}

// scanRequest counts the descriptors, entries and messages of the
// encoded RateLimitRequest data, as it arrived (in frames), without
// copying it. It returns false for what is not the wire format it
// expects (proto.Unmarshal then says what).
func scanRequest(data mem.BufferSlice) (requestScan, bool) {
	sc := requestScan{over: -1}
	c := wireCursor{bufs: data}
	for !c.done() {
		num, typ, ok := c.tag()
		if !ok {
			return sc, false
		}
		if num != 2 || typ != protowire.BytesType { // not RateLimitRequest.descriptors
			if !c.skipValue(typ) {
				return sc, false
			}
			continue
		}
		size, _, ok := c.varint()
		if !ok {
			return sc, false
		}
		sc.descriptors++
		sc.objects++
		entries := 0
		for size > 0 {
			before := c.read
			num, typ, ok := c.tag()
			if !ok || !c.skipValue(typ) || c.read-before > size {
				return sc, false
			}
			size -= c.read - before
			if typ == protowire.BytesType { // entries, limit, hits_addend: messages
				sc.objects++
				if num == 1 {
					entries++
				}
			}
		}
		if entries > maxEntries && sc.over < 0 {
			sc.over, sc.overEntries = sc.descriptors-1, entries
		}
	}
	return sc, true
}

// wireCursor reads protobuf wire format across the buffers of a
// mem.BufferSlice.
type wireCursor struct {
	bufs mem.BufferSlice
	next int    // the buffer after b
	b    []byte // what is left of the current buffer
	read uint64 // bytes consumed
}

func (c *wireCursor) done() bool {
	for len(c.b) == 0 && c.next < len(c.bufs) {
		c.b = c.bufs[c.next].ReadOnlyData()
		c.next++
	}
	return len(c.b) == 0
}

func (c *wireCursor) varint() (v uint64, n int, ok bool) {
	for shift := 0; shift < 64; shift += 7 {
		if c.done() {
			return 0, 0, false
		}
		x := c.b[0]
		c.b = c.b[1:]
		c.read++
		n++
		v |= uint64(x&0x7f) << shift
		if x < 0x80 {
			return v, n, true
		}
	}
	return 0, 0, false
}

func (c *wireCursor) tag() (protowire.Number, protowire.Type, bool) {
	v, _, ok := c.varint()
	num, typ := protowire.DecodeTag(v)
	return num, typ, ok && num.IsValid()
}

func (c *wireCursor) skip(n uint64) bool {
	for n > 0 {
		if c.done() {
			return false
		}
		k := min(n, uint64(len(c.b)))
		c.b = c.b[k:]
		c.read += k
		n -= k
	}
	return true
}

// skipValue skips a field's value of wire type typ (groups are not
// expected in these messages).
func (c *wireCursor) skipValue(typ protowire.Type) bool {
	switch typ {
	case protowire.VarintType:
		_, _, ok := c.varint()
		return ok
	case protowire.Fixed64Type:
		return c.skip(8)
	case protowire.Fixed32Type:
		return c.skip(4)
	case protowire.BytesType:
		n, _, ok := c.varint()
		return ok && c.skip(n)
	}
	return false
}

// refusedDomain begins the domain of a request that budgetCodec refused,
// followed by refusedBusy or refusedInvalid and the message.
const (
	refusedDomain  = "\xff"
	refusedBusy    = 'B'
	refusedInvalid = 'I'
)

func refuse(req *rlsv3.RateLimitRequest, why byte, msg string) {
	req.Reset()
	req.Domain = refusedDomain + string(why) + msg
}

// refusal returns the error of a request that budgetCodec refused, or nil.
func refusal(req *rlsv3.RateLimitRequest) error {
	d, ok := strings.CutPrefix(req.GetDomain(), refusedDomain)
	if !ok || d == "" {
		return nil
	}
	if d[0] == refusedBusy {
		return status.Error(codes.ResourceExhausted, d[1:])
	}
	return status.Error(codes.InvalidArgument, d[1:])
}
