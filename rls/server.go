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
	// (floodgate.Hit.Overdraw), and a check (hits_addend 0) is over only
	// when the key is strictly past its limit. False, floodgate's
	// default, counts only what is admitted.
	CountOverLimit bool
	// NearLimitRatio is the share of a limit past which a hit counts as
	// near it (floodgate_rls_near_limit_total): a hit that takes the
	// limit above floor(limit × ratio), as envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO: above 0, at most 1. Zero means 0.8.
	NearLimitRatio float64
	// Stats, if set, receives the requests' counts and the
	// configuration's loads in envoyproxy/ratelimit's terms, counted
	// where the Server's own series are: the floodgate command sends them
	// as statsd. Leave it nil.
	Stats rlstats.Recorder

	// debounce is the Watcher's quiet time before a reload; zero means
	// the package doc's 100ms. The tests set it (export_test.go).
	debounce time.Duration
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
	shadow   bool                            // Options.ShadowMode
	over     bool                            // Options.CountOverLimit
	near     float64                         // Options.NearLimitRatio, or its default
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
	s := &Server{enf: opts.Enforcer, logger: logger, shadow: opts.ShadowMode, over: opts.CountOverLimit, near: cmp.Or(opts.NearLimitRatio, defaultNearLimitRatio), metrics: m, gather: gather,
		health: health.NewServer(), drained: make(chan struct{}), gates: map[string]*enforce.Gate{}, decoding: make(chan struct{}, 1)}
	s.plans.New = func() any { return new(plan) }
	s.fixed.Store(opts.Config)
	if opts.ConfigDir != "" {
		w, err := rlconfig.Watch(opts.ConfigDir, rlconfig.WatchOptions{
			Options:  opts.ConfigOptions,
			Debounce: opts.debounce,
			OnReload: s.reloaded,
		})
		if err != nil {
			m.configLoadError.Inc()
			m.upConfigLoad(false)
			return nil, err
		}
		s.watcher = w
	}
	cfg := s.Config()
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
		s.logger.Error("rate-limit configuration refused; the previous one stays in force", "err", err)
		return
	}
	s.metrics.configLoadSuccess.Inc()
	s.metrics.upConfigLoad(true)
	s.logger.Info("rate-limit configuration reloaded", "domains", cfg.Domains(), "limits", len((*rlmatch.Config)(cfg).Limits()), "files", len(cfg.Files()))
	s.warnConfig(cfg)
}

// warnConfig logs what of the configuration envoyproxy/ratelimit would
// apply and the Server does not: what the directory holds and was not
// read, and the limits in quota_mode, which are enforced as any other;
// and what does nothing there either: a replaces that names no limit,
// shadow_mode on a descriptor without a rate_limit. It counts them all
// in floodgate_config_ignored_settings.
func (s *Server) warnConfig(cfg *rlconfig.Config) {
	if sk := cfg.Skipped(); len(sk) > 0 {
		s.logger.Warn("entries of the configuration directory not read: floodgate reads the *.yaml and *.yml files at its top level, "+
			"where envoyproxy/ratelimit reads every file, subdirectories included; rename or move them to apply their limits", "skipped", sk)
	}
	var quota, dangling []string
	named := map[string]bool{}
	for _, l := range (*rlmatch.Config)(cfg).Limits() {
		if l.QuotaMode {
			quota = append(quota, l.Label)
		}
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
	if len(quota) > 0 {
		s.logger.Warn("quota_mode is not interpreted: these limits deny as any other, where envoyproxy/ratelimit lets a request "+
			"through while one of its quota_mode descriptors has quota left", "limits", quota)
	}
	ignored := cfg.Ignored()
	for _, ig := range ignored {
		s.logger.Warn("a setting of the configuration has no effect", "setting", ig)
	}
	s.metrics.configIgnored.Set(float64(len(cfg.Skipped()) + len(dangling) + len(quota) + len(ignored)))
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
