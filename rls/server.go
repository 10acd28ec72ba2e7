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
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"

	"github.com/floodgate-rl/floodgate/enforce"
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
	// largeRequest is the size, in bytes of descriptor keys and values,
	// from which a request is large. Envoy's descriptors are a few
	// hundred bytes (a path, an address, a header); a large request is a
	// flood or a misconfiguration.
	largeRequest = 16 << 10
	// maxLargeInFlight bounds the bytes of the large requests decided at
	// once: one 1 MiB request, or a few of tens of KiB. A large request that would exceed it is shed: decided by its
	// descriptors' failure modes without the store (failure_mode error
	// answers Unavailable, closed OVER_LIMIT, open OK, local by the local
	// limits), counted in floodgate_rls_shed_total and logged with the
	// degraded decisions. A request under largeRequest is never shed: one
	// client's flood of large requests cannot crowd out the others'.
	maxLargeInFlight = 1 << 20
)

// ErrShed is the error of a large request (16 KiB or more) shed because
// 1 MiB of them are already being decided: what its descriptors' failure
// modes decide.
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
	decoding chan struct{} // a turn to decode a large request (oneLargeAtATime)
	drain    sync.Once
	plans    sync.Pool // *plan: the working memory of the requests

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
		health: health.NewServer(), drained: make(chan struct{}), gates: map[string]*enforce.Gate{}, decoding: make(chan struct{}, 1)}
	s.plans.New = func() any { return new(plan) }
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
// server (package rlconfig/xds). A request reads the
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
	b := []byte(domain[:min(len(domain), 128)])
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.-+/", c) >= 0) {
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
// should have: a receive limit of 1 MiB, at most 1024 streams per
// connection, keepalive pings no more often than every 10s (with or without streams open, as Envoy's
// keepalive may ping an idle connection), and a codec that decodes one
// large request (16 KiB of descriptor keys and values or more) at a time: a flood of them
// takes one CPU for its decoding, not every CPU, so the small requests
// of everyone else are still decided within their budgets.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(oneLargeAtATime{CodecV2: encoding.GetCodecV2(proto.Name), turn: s.decoding}),
		grpc.MaxRecvMsgSize(maxMessageSize),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
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

// oneLargeAtATime is the proto codec, decoding messages of largeRequest
// bytes or more one at a time.
type oneLargeAtATime struct {
	encoding.CodecV2
	turn chan struct{}
}

func (c oneLargeAtATime) Unmarshal(data mem.BufferSlice, v any) error {
	if data.Len() >= largeRequest {
		c.turn <- struct{}{}
		defer func() { <-c.turn }()
	}
	return c.CodecV2.Unmarshal(data, v)
}
