package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/internal/rlstats"
	"github.com/floodgate-rl/floodgate/internal/upstats"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// serving reports whether args ask for the service: no subcommand,
// "serve", or a flag first.
func serving(args []string) bool {
	return len(args) == 0 || args[0] == "serve" || strings.HasPrefix(args[0], "-")
}

// serveConfig is the service's configuration, from the environment and
// the flags. docs/SERVICE.md lists it with envoyproxy/ratelimit's names.
type serveConfig struct {
	RedisURL        string        // REDIS_URL: redisstore's URL forms; empty means in memory
	RedisPrefix     string        // CACHE_KEY_PREFIX: the Redis key prefix; empty means redisstore's
	GRPCAddr        string        // GRPC_ADDR (or GRPC_PORT): default :8081
	GRPCUDS         string        // GRPC_UDS: gRPC on this unix socket instead of GRPC_ADDR, as upstream
	HTTPAddr        string        // HTTP_ADDR (or PORT): default :8080
	DebugAddr       string        // DEBUG_ADDR (or DEBUG_PORT): /healthcheck, /rlconfig, /metrics apart; empty means on HTTP_ADDR
	JSONAddr        string        // JSON_ADDR: POST /json on a listener of its own, TLS as gRPC's; empty means on HTTP_ADDR, or off
	JSONOff         bool          // JSON_ADDR=off, or unset while gRPC requires client certificates: no POST /json
	ConfigDir       string        // CONFIG_DIR or -config-dir (or RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config)
	MergeDomains    bool          // MERGE_DOMAIN_CONFIG
	AllowEmpty      bool          // CONFIG_ALLOW_EMPTY: a reload that finds no file puts no limit in force, instead of being refused
	DecisionTimeout time.Duration // DECISION_TIMEOUT: default 50ms
	DenialCache     int           // DENIAL_CACHE_SIZE (or LOCAL_CACHE_SIZE_IN_BYTES / 300): denials answered locally; 0 (default) is off
	EscrowPeriod    time.Duration // ESCROW_PERIOD: hot descriptors decided in memory from leases of this period (floodgate.Options.Escrow); 0 (default) is off
	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT: how long in-flight calls may take to finish; default 10s
	MaxConnAge      time.Duration // GRPC_MAX_CONNECTION_AGE: a gRPC connection is sent GOAWAY after it; default 24h, as upstream
	MaxConnAgeGrace time.Duration // GRPC_MAX_CONNECTION_AGE_GRACE: then closed this much later; default 1h, as upstream
	LogLevel        slog.Level    // LOG_LEVEL: debug, info, warn, error
	LogFormat       string        // LOG_FORMAT: text or json

	// Not from the environment: the listeners' bounds, so that a client
	// trickling a body or holding idle connections cannot keep them (and
	// their memory, and the process's file descriptors) for ever.
	httpReadTimeout time.Duration // a whole request, its 1 MiB body included: 30s
	idleTimeout     time.Duration // an idle connection (HTTP keep-alive; gRPC with no call open, then GOAWAY): 2m
	ShadowMode      bool          // SHADOW_MODE: every limit in shadow mode
	Reflection      bool          // GRPC_REFLECTION: gRPC server reflection, which lists the services to any caller
	CountOverLimit  bool          // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false, or unset under xDS: hits count past their limits
	NearLimitRatio  float64       // NEAR_LIMIT_RATIO: default 0.8
	Headers         rls.Headers   // LIMIT_RESPONSE_HEADERS_ENABLED with LIMIT_*_HEADER, and DRAFT_RATELIMIT_HEADERS: none by default
	QuotaMode       bool          // QUOTA_MODE: every limit in quota mode
	DynamicMetadata bool          // RESPONSE_DYNAMIC_METADATA: upstream's dynamic_metadata on every response

	// Beside files, as envoyproxy/ratelimit reads them (xdsenv.go).
	XDS               *xdsSettings      // CONFIG_TYPE=GRPC_XDS_SOTW: the configuration from an xDS server; nil means files
	GRPCTLS           *grpcTLS          // GRPC_SERVER_USE_TLS: TLS on the gRPC listener; nil means plaintext
	HealthyWithConfig bool              // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: health fails while no domain is configured
	Stats             *upstats.Settings // USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS (the mapped series)...: envoyproxy/ratelimit's statistics; nil means none
	statsdUnset       bool              // none of USE_STATSD, USE_DOG_STATSD, DISABLE_STATS is set: logged at start

	Tracing tracingConfig // TRACING_ENABLED and TRACING_*: spans over OTLP (tracing.go); zero is off
	// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: the health checks fail while
	// Redis is lost (its breaker open), as upstream's fail while its pool
	// has no connection.
	HealthWithRedis bool
	// REDIS_PERSECOND=true: the limits of one second in REDIS_PERSECOND_URL's Redis (persecond.go).
	PerSecondURL string
	// Upstream's settings without effect, logged at start; nil for none
	// (a pointer, so that serveConfig stays comparable).
	notes *[]settingNote
}

// The bounds of the listeners' connections, so that a client opening
// connections and sending nothing cannot take the process's file
// descriptors: 1,100 silent connections under a limit of 1,024 made
// every accept fail ("too many open files"), the health checks and
// Envoy's new connections with them.
const (
	// maxGRPCConns is how many connections the gRPC listener holds at
	// once; the next wait in the kernel's accept queue until one closes.
	// Envoy opens one or a few per worker thread: a fleet needing more
	// runs more instances.
	maxGRPCConns = 640
	// maxHTTPConns is the same for HTTP_ADDR and for JSON_ADDR, each.
	maxHTTPConns = 128
	// maxDebugConns is the same for DEBUG_ADDR (Prometheus, an operator).
	maxDebugConns = 32
	// Together, maxGRPCConns, two maxHTTPConns and maxDebugConns (928)
	// stay below the 1,024 descriptors of a default ulimit -n, leaving
	// room for Redis, the configuration files and the runtime.

	// connSetupTimeout is how long a new connection may take to set up:
	// the TLS handshake and the HTTP/2 preface on gRPC (grpc-go's
	// default is 120s), the TLS handshake and a request's headers on
	// HTTP. A silent connection is closed after it.
	connSetupTimeout = 5 * time.Second
)

// serveUsage is what -h prints: the service's flag and environment, in
// brief; docs/SERVICE.md has the rest.
const serveUsage = `usage: floodgate [serve] [-config-dir DIR]

Envoy's rate-limit service (RLS v3 on gRPC, POST /json on HTTP) on the
envoyproxy/ratelimit YAML files of DIR (or CONFIG_DIR), configured by the
environment, envoyproxy/ratelimit's names read where floodgate's are unset:

  CONFIG_DIR            or RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
  CONFIG_TYPE           FILE, or GRPC_XDS_SOTW: from an xDS server (CONFIG_GRPC_XDS_*,
                        XDS_CLIENT_*, FORCE_START_WITHOUT_INITIAL_CONFIG)
  GRPC_SERVER_USE_TLS   TLS on gRPC (GRPC_SERVER_TLS_CERT, _KEY, GRPC_CLIENT_TLS_CACERT)
  REDIS_URL             redis://, rediss://, unix:// or HOST:PORT; empty: in memory
                        (REDIS_TYPE, REDIS_AUTH, REDIS_TLS, REDIS_SOCKET_TYPE,
                        REDIS_TLS_CLIENT_CERT, _KEY, REDIS_TLS_CACERT,
                        REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, REDIS_SENTINEL_AUTH, REDIS_TIMEOUT)
  REDIS_PERSECOND       true: the limits of one second in REDIS_PERSECOND_URL's Redis
                        (REDIS_PERSECOND_TYPE, _AUTH, _TLS, _SOCKET_TYPE, _SENTINEL_AUTH)
  CACHE_KEY_PREFIX      the Redis key prefix (fg:)
  GRPC_ADDR             :8081 (GRPC_HOST, GRPC_PORT); GRPC_UDS: a unix socket instead
  HTTP_ADDR             :8080 (HOST, PORT)
  DEBUG_ADDR            /rlconfig, and /metrics apart (DEBUG_HOST, DEBUG_PORT); unset:
                        no /rlconfig, /metrics on HTTP_ADDR
  JSON_ADDR             POST /json on a listener of its own, over TLS with gRPC's
                        certificate and client CA when GRPC_SERVER_USE_TLS; off: no
                        /json; unset: /json on HTTP_ADDR, or none while gRPC requires
                        client certificates (/healthcheck stays on HTTP_ADDR, plain)
  GRPC_REFLECTION       true: gRPC server reflection (off)
  DECISION_TIMEOUT      50ms, the budget of one decision
  SHUTDOWN_TIMEOUT      10s
  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT  false: hits count past their limits (unset:
                        true for files, false under xDS, as Envoy Gateway needs)
  LIMIT_RESPONSE_HEADERS_ENABLED  true: upstream's headers (LIMIT_LIMIT_HEADER, _REMAINING_,
                        _RESET_); DRAFT_RATELIMIT_HEADERS true: draft-11's RateLimit fields
  USE_STATSD            true: upstream's statsd statistics to STATSD_HOST:STATSD_PORT
                        (localhost:8125, TCP; STATSD_PROTOCOL=udp), every STATS_FLUSH_INTERVAL
                        (10s), with EXTRA_TAGS; USE_DOG_STATSD (and _MOGRIFIERS), DISABLE_STATS
  USE_PROMETHEUS        true: /metrics on PROMETHEUS_ADDR (:9090), with upstream's mapped
                        series (PROMETHEUS_MAPPER_YAML) beside floodgate's
  ESCROW_PERIOD         off; 50ms to 1s: hot descriptors decided in memory from leases of
                        quota of that period, never over the limit across instances
  MERGE_DOMAIN_CONFIG, SHADOW_MODE, NEAR_LIMIT_RATIO, DENIAL_CACHE_SIZE
  (LOCAL_CACHE_SIZE_IN_BYTES), GRPC_MAX_CONNECTION_AGE(_GRACE), LOG_LEVEL, LOG_FORMAT
  TRACING_ENABLED       true: spans over OTLP (TRACING_EXPORTER_PROTOCOL http or grpc,
                        TRACING_SERVICE_*, TRACING_SAMPLING_RATE, OTEL_EXPORTER_OTLP_*)

Every problem is listed at start, with exit status 2. docs/SERVICE.md
tells the rest.
`

// errConfig marks a configuration that cannot be used: exit status 2.
var errConfig = errors.New("invalid configuration")

// parseServe reads the configuration, listing every problem.
func parseServe(args []string, getenv func(string) string) (serveConfig, error) {
	c := serveConfig{
		GRPCAddr:        ":8081",
		HTTPAddr:        ":8080",
		DecisionTimeout: 50 * time.Millisecond, // the Limiter's default
		ShutdownTimeout: 10 * time.Second,
		MaxConnAge:      24 * time.Hour,
		MaxConnAgeGrace: time.Hour,
		httpReadTimeout: 30 * time.Second,
		idleTimeout:     2 * time.Minute,
	}
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, a...)...))
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configDir := fs.String("config-dir", "", "the directory of envoyproxy/ratelimit YAML files (CONFIG_DIR)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return c, err
	} else if err != nil {
		bad("flags", "%v (the service takes -config-dir DIR; everything else is in the environment)", err)
	} else if fs.NArg() > 0 {
		bad("flags", "unexpected arguments %q", fs.Args())
	}

	// envoyproxy/ratelimit's HOST:PORT pairs, when floodgate's *_ADDR is
	// unset: a host alone listens on upstream's default port.
	check := func(name, a string) {
		_, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			bad(name, "%q is not HOST:PORT", a)
		}
	}
	addr := func(name, hostName, portName, defaultPort string, dst *string) {
		if v := getenv(name); v != "" {
			*dst = v
		} else if h, p := getenv(hostName), getenv(portName); h != "" || p != "" {
			if p == "" {
				p = defaultPort
			}
			*dst = net.JoinHostPort(h, p)
		}
		if *dst != "" {
			check(name, *dst)
		}
	}
	addr("GRPC_ADDR", "GRPC_HOST", "GRPC_PORT", "8081", &c.GRPCAddr)
	// GRPC_UDS replaces the TCP listener, as upstream, which then ignores
	// GRPC_HOST and GRPC_PORT; floodgate's own GRPC_ADDR beside it is a
	// contradiction.
	if c.GRPCUDS = getenv("GRPC_UDS"); c.GRPCUDS != "" && getenv("GRPC_ADDR") != "" {
		bad("GRPC_UDS", "is set beside GRPC_ADDR: gRPC listens on one of them; unset one")
	}
	addr("HTTP_ADDR", "HOST", "PORT", "8080", &c.HTTPAddr)
	addr("DEBUG_ADDR", "DEBUG_HOST", "DEBUG_PORT", "6070", &c.DebugAddr)
	switch v := getenv("JSON_ADDR"); {
	case strings.EqualFold(v, "off"):
		c.JSONOff = true
	case v != "":
		c.JSONAddr = v
		check("JSON_ADDR", v)
	}
	// The same address twice cannot be listened on, except port 0 (any
	// free port).
	same := func(a, b string) bool { return a != "" && a == b && !strings.HasSuffix(a, ":0") }
	if same(c.DebugAddr, c.HTTPAddr) {
		bad("DEBUG_ADDR", "is HTTP_ADDR (%s); leave it empty to serve both there", c.HTTPAddr)
	}
	if same(c.GRPCAddr, c.HTTPAddr) || same(c.GRPCAddr, c.DebugAddr) || same(c.GRPCAddr, c.JSONAddr) {
		bad("GRPC_ADDR", "%s is also an HTTP address", c.GRPCAddr)
	}
	if same(c.JSONAddr, c.HTTPAddr) {
		bad("JSON_ADDR", "%s is also HTTP_ADDR: it is a listener of its own; leave it empty to serve /json on HTTP_ADDR", c.JSONAddr)
	}

	// What the subcommands read alike (env.go).
	shared, sharedErrs := readEnv(getenv)
	errs = append(errs, sharedErrs...)
	c.RedisURL, c.RedisPrefix, c.MergeDomains, c.ShadowMode = shared.RedisURL, shared.RedisPrefix, shared.MergeDomains, shared.ShadowMode
	c.PerSecondURL = shared.PerSecondURL
	if len(shared.Notes) > 0 {
		c.notes = &shared.Notes
	}
	c.ConfigDir = *configDir
	if c.ConfigDir == "" {
		c.ConfigDir = getenv("CONFIG_DIR")
	}
	xdsMode := strings.EqualFold(getenv("CONFIG_TYPE"), "GRPC_XDS_SOTW")
	if xdsMode && c.ConfigDir != "" {
		bad("CONFIG_DIR", "is set beside CONFIG_TYPE=GRPC_XDS_SOTW, which takes the configuration from the xDS server; unset one")
	}
	if c.ConfigDir == "" {
		c.ConfigDir = shared.ConfigDir // RUNTIME_ROOT's, which readEnv ignores under xDS, as upstream, with a log line
	}
	if c.ConfigDir == "" && !xdsMode {
		bad("CONFIG_DIR", "is required (or -config-dir): the directory of envoyproxy/ratelimit YAML files")
	}
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0 && r <= 1) {
			bad("NEAR_LIMIT_RATIO", "%q is not a number above 0 and at most 1", v)
		}
		c.NearLimitRatio = r
	}

	boolean := func(name string) bool { return envBool(getenv, bad, name) }
	c.AllowEmpty = boolean("CONFIG_ALLOW_EMPTY")
	c.Reflection = boolean("GRPC_REFLECTION")
	if c.HealthWithRedis = boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"); c.HealthWithRedis && c.RedisURL == "" {
		bad("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "is true but REDIS_URL is empty: there is no Redis for the health checks to follow")
	}
	c.QuotaMode = boolean("QUOTA_MODE")
	c.DynamicMetadata = boolean("RESPONSE_DYNAMIC_METADATA")
	// The response's headers, as upstream adds them: none unless asked.
	c.Headers.Draft = boolean("DRAFT_RATELIMIT_HEADERS")
	if boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		c.Headers.Limit = cmp.Or(getenv("LIMIT_LIMIT_HEADER"), "RateLimit-Limit")
		c.Headers.Remaining = cmp.Or(getenv("LIMIT_REMAINING_HEADER"), "RateLimit-Remaining")
		c.Headers.Reset = cmp.Or(getenv("LIMIT_RESET_HEADER"), "RateLimit-Reset")
		for _, n := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
			if v := getenv(n); v != "" && !httpguts.ValidHeaderFieldName(v) {
				bad(n, "%q is not a header name", v)
			}
		}
	}
	// envoyproxy/ratelimit counts every hit, past the limit too, unless
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is true; floodgate counts
	// only what it admits unless told otherwise. Unset, a configuration
	// from files keeps floodgate's (their domains may say count_over_limit)
	// and one over xDS, which carries no floodgate setting and comes from
	// Envoy Gateway, whose costs charged after the response need it, takes
	// upstream's.
	if v := getenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); v != "" {
		c.CountOverLimit = !boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	} else {
		c.CountOverLimit = strings.EqualFold(getenv("CONFIG_TYPE"), "GRPC_XDS_SOTW")
	}
	// What envoyproxy/ratelimit does and floodgate cannot: refused, so
	// that no deployment switches and silently loses it.
	for _, u := range []struct{ name, why string }{} {
		v := getenv(u.name)
		if v == "" {
			continue
		}
		if b, err := strconv.ParseBool(v); err == nil && !b {
			continue // false: what floodgate does
		}
		bad(u.name, "%q is not supported: %s", v, u.why)
	}
	if v := getenv("BACKEND_TYPE"); v != "" && !strings.EqualFold(v, "redis") {
		bad("BACKEND_TYPE", "%q is not supported: Redis (REDIS_URL) or memory only", v)
	}
	// memcache's settings, refused unless they say upstream's default,
	// which asks for nothing.
	for _, m := range []struct{ name, def string }{
		{"MEMCACHE_HOST_PORT", ""}, {"MEMCACHE_MAX_IDLE_CONNS", "2"}, {"MEMCACHE_SRV", ""}, {"MEMCACHE_SRV_REFRESH", "0"},
		{"MEMCACHE_TLS", "false"}, {"MEMCACHE_TLS_CLIENT_CERT", ""}, {"MEMCACHE_TLS_CLIENT_KEY", ""}, {"MEMCACHE_TLS_CACERT", ""},
		{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false"},
	} {
		if v := getenv(m.name); v != "" && !strings.EqualFold(v, m.def) {
			bad(m.name, "%q is not supported: memcache is not a backend of floodgate's; Redis (REDIS_URL) or memory only", v)
		}
	}
	c.Tracing = parseTracing(getenv, bad)
	parseSources(&c, getenv, boolean, bad)
	if same(c.JSONAddr, c.DebugAddr) {
		bad("JSON_ADDR", "%s is also the debug listener's (DEBUG_ADDR or PROMETHEUS_ADDR)", c.JSONAddr)
	}
	// POST /json decides as ShouldRateLimit does, so it is served no less
	// protected: where gRPC requires client certificates, /json is off
	// unless JSON_ADDR gives it a listener that requires them too.
	if c.JSONAddr == "" && c.GRPCTLS != nil && c.GRPCTLS.ClientCA != "" {
		c.JSONOff = true
	}
	if st := upstats.Parse(getenv, bad); st.Enabled() {
		c.Stats = &st
	}
	c.statsdUnset = getenv("USE_STATSD") == "" && getenv("USE_DOG_STATSD") == "" && getenv("DISABLE_STATS") == ""

	duration := func(name string, dst *time.Duration) {
		v := getenv(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad(name, "%q is not a positive duration such as 50ms", v)
			return
		}
		*dst = d
	}
	duration("DECISION_TIMEOUT", &c.DecisionTimeout)
	count := func(name string) (int, bool) {
		v := getenv(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bad(name, "%q is not a whole number, 0 or more", v)
			return 0, false
		}
		return n, true
	}
	duration("ESCROW_PERIOD", &c.EscrowPeriod) // its bounds are floodgate.New's
	if n, ok := count("DENIAL_CACHE_SIZE"); ok {
		c.DenialCache = n
	} else if n, ok := count("LOCAL_CACHE_SIZE_IN_BYTES"); ok {
		// envoyproxy/ratelimit sizes its over-limit cache in bytes; a
		// cached denial takes about 300.
		c.DenialCache = n / 300
	}
	duration("SHUTDOWN_TIMEOUT", &c.ShutdownTimeout)
	duration("GRPC_MAX_CONNECTION_AGE", &c.MaxConnAge)
	duration("GRPC_MAX_CONNECTION_AGE_GRACE", &c.MaxConnAgeGrace)

	switch v := strings.ToLower(getenv("LOG_LEVEL")); v {
	case "", "info":
	case "debug", "trace": // trace: envoyproxy/ratelimit's (logrus's) finest
		c.LogLevel = slog.LevelDebug
	case "warn", "warning":
		c.LogLevel = slog.LevelWarn
	case "error", "fatal", "panic": // logrus's coarsest, as upstream takes them
		c.LogLevel = slog.LevelError
	default:
		bad("LOG_LEVEL", "%q is not one of debug, info, warn, error", getenv("LOG_LEVEL"))
	}
	c.LogFormat = strings.ToLower(getenv("LOG_FORMAT"))
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("LOG_FORMAT", "%q is not text or json", getenv("LOG_FORMAT"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("%w:\n%w", errConfig, err)
	}
	return c, nil
}

// serveHooks are what tests observe of a running service.
type serveHooks struct {
	// ready, if set, is called with the listeners' addresses once they
	// accept connections.
	ready func(grpcAddr, httpAddr, debugAddr string)
	// json, if set, is called with JSON_ADDR's listener's address, when
	// there is one, before ready.
	json func(addr string)
}

// serve runs the service until SIGINT or SIGTERM (or ctx is done), then
// shuts down gracefully: health checks fail first, in-flight calls
// finish (at most SHUTDOWN_TIMEOUT), then the stores close.
func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, hooks serveHooks) int {
	cfg, err := parseServe(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		io.WriteString(stderr, serveUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "floodgate:", err)
		return 2
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})
	}
	logger := slog.New(h)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runService(ctx, cfg, logger, hooks); err != nil {
		logger.Error("floodgate stopped", "err", err)
		if errors.Is(err, errConfig) {
			fmt.Fprintln(stderr, "floodgate:", err)
			return 2
		}
		return 1
	}
	return 0
}

// runService builds the store, the Enforcer and the Server, serves, and
// shuts down when ctx is done.
func runService(ctx context.Context, cfg serveConfig, logger *slog.Logger, hooks serveHooks) error {
	tr, err := startTracing(ctx, cfg.Tracing, logger)
	if err != nil {
		return err
	}
	defer tr.shutdown(logger) // last: after the servers stopped, every span has ended
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var store floodgate.Store
	var breaker *redisstore.Store // its breaker's state is exported; nil in memory
	var ovr floodgate.Overrides   // per-key limits set with floodgate override; Redis only

	var both worstBreaker // with REDIS_PERSECOND, the two Redis's breakers
	if cfg.RedisURL == "" {
		logger.Warn("REDIS_URL is empty: the limits are kept in this process's memory, per instance; set REDIS_URL to share them across instances")
		mem := memstore.New(memstore.Options{})
		defer mem.Close()
		store = mem
	} else {
		dialCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rs, err := redisstore.New(dialCtx, redisstore.Options{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix,
			Breaker: breakerstore.Options{OnStateChange: func(from, to breakerstore.State) {
				logger.Warn("redis circuit breaker", "from", from.String(), "to", to.String())
			}}})
		cancel()
		if err != nil {
			return fmt.Errorf("%w: REDIS_URL: %s", errConfig, redisopt.Redact(err.Error(), cfg.RedisURL))
		}
		defer rs.Close()
		store, breaker = rs, rs
		if cfg.PerSecondURL != "" { // persecond.go
			split, ps, err := openPerSecond(ctx, cfg, rs, logger)
			if err != nil {
				return err
			}
			defer ps.Close()
			store, both = split, worstBreaker{rs, ps}
		}
		// The overrides beside the limits, refreshed every 5s.
		loadCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		table, err := overrides.New(loadCtx, overrides.Options{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Registerer: reg, Logger: logger})
		cancel()
		if err != nil {
			return fmt.Errorf("%w: REDIS_URL: %s", errConfig, redisopt.Redact(err.Error(), cfg.RedisURL))
		}
		defer table.Close()
		ovr = table
	}
	store = tr.store(store) // a span per store call when tracing
	limiter, err := floodgate.New(store, floodgate.Options{Timeout: cfg.DecisionTimeout, DenialCacheSize: cfg.DenialCache, Overrides: ovr,
		Escrow: floodgate.Escrow{Period: cfg.EscrowPeriod}})
	if err != nil {
		return fmt.Errorf("%w: ESCROW_PERIOD: %w", errConfig, err) // the one option the environment can make invalid here
	}
	defer limiter.Close() // gives back the leases' unused units, before the store closes
	eo := enforce.Options{Limiter: limiter, Registerer: reg, Logger: logger}
	if breaker != nil {
		eo.Breaker = breaker
	}
	if both[0] != nil {
		eo.Breaker = both
	}
	enf, err := enforce.New(eo)
	if err != nil {
		return err
	}
	defer enf.Close()
	for _, n := range deref(cfg.notes) {
		logger.Info("an envoyproxy/ratelimit setting is accepted and has no effect", "setting", n.Name, "value", n.Value, "why", n.Why)
	}
	// envoyproxy/ratelimit's statistics, beside floodgate's metrics.
	if cfg.statsdUnset {
		logger.Info("USE_STATSD is unset: no statsd statistics are sent, where envoyproxy/ratelimit sends them to localhost:8125 by default; " +
			"set USE_STATSD=true for them (floodgate's metrics are on /metrics either way)")
	}
	var upRec rlstats.Recorder // nil, not a nil *upstats.Stats, when none
	var upOpts []grpc.ServerOption
	if cfg.Stats != nil {
		ups, err := upstats.New(*cfg.Stats, reg, logger)
		if err != nil {
			return fmt.Errorf("%w: %w", errConfig, err)
		}
		defer ups.Close() // after the listeners: the last calls are flushed
		upRec, upOpts = ups, []grpc.ServerOption{grpc.ChainUnaryInterceptor(ups.UnaryServerInterceptor())}
	}
	var src *xdsSource // the configuration over xDS (xds.go)
	var fixed *rlconfig.Config
	if cfg.XDS != nil {
		if src, err = startXDS(ctx, cfg.XDS, rlconfig.Options{MergeDomains: cfg.MergeDomains}, reg, logger); errors.Is(err, errStoppedBeforeConfig) {
			return nil
		} else if err != nil {
			return err
		}
		defer src.Close()
		if fixed, err = rlconfig.Parse(nil, rlconfig.Options{}); err != nil { // none yet: every domain unknown
			return err
		}
	}
	srv, err := rls.New(rls.Options{
		Enforcer:         enf,
		ConfigDir:        cfg.ConfigDir,
		Config:           fixed,
		ConfigOptions:    rlconfig.Options{MergeDomains: cfg.MergeDomains},
		Registerer:       reg,
		Gatherer:         reg,
		ShadowMode:       cfg.ShadowMode,
		NearLimitRatio:   cfg.NearLimitRatio,
		CountOverLimit:   cfg.CountOverLimit,
		Headers:          cfg.Headers,
		QuotaMode:        cfg.QuotaMode,
		DynamicMetadata:  cfg.DynamicMetadata,
		AllowEmptyConfig: cfg.AllowEmpty,
		Stats:            upRec,
	})
	if err != nil {
		return fmt.Errorf("%w: CONFIG_DIR %s:\n%w", errConfig, cfg.ConfigDir, err)
	}
	defer srv.Close()
	if err := src.attach(srv); err != nil {
		return err
	}
	gate := newGate(cfg, src, srv.Config, eo.Breaker)
	grpcOpts := append(append(upOpts, srv.GRPCServerOptions()...), grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: cfg.MaxConnAge, MaxConnectionAgeGrace: cfg.MaxConnAgeGrace,
		MaxConnectionIdle: cfg.idleTimeout, // Envoy reconnects on the GOAWAY
	}))
	grpcOpts = append(grpcOpts, tr.serverOptions()...) // spans when tracing (tracing.go)
	if cfg.GRPCTLS != nil {
		tc, err := serverTLS(*cfg.GRPCTLS, logger, "h2")
		if err != nil {
			return fmt.Errorf("%w: %w", errConfig, err)
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tc)))
	}
	grpcOpts = append(grpcOpts, grpc.ConnectionTimeout(connSetupTimeout))
	gs := grpc.NewServer(append(grpcOpts, gate.serverOptions()...)...)
	srv.Register(gs)
	closeRLQS, err := registerRLQS(ctx, gs, cfg, srv, reg, logger) // Envoy's rate_limit_quota filter (rlqs.go)
	if err != nil {
		return err
	}
	defer closeRLQS()
	if cfg.Reflection {
		reflection.Register(gs)
	}
	errLog := slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	httpServer := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: min(connSetupTimeout, cfg.httpReadTimeout),
			ReadTimeout: cfg.httpReadTimeout, IdleTimeout: cfg.idleTimeout, ErrorLog: errLog}
	}
	public := srv.Handler()
	if cfg.DebugAddr != "" {
		public = publicOnly(public)
	}
	web := httpServer(gate.handler(public))
	if cfg.JSONOff || cfg.JSONAddr != "" {
		web.Handler = withoutJSON(web.Handler)
	}
	var debug, jsonWeb *http.Server
	if cfg.DebugAddr != "" {
		debug = httpServer(gate.handler(srv.DebugHandler()))
	}
	// /json on a listener of its own rather than HTTP_ADDR over TLS with
	// the client certificate asked per route: HTTP_ADDR keeps serving
	// /healthcheck in plain HTTP to probes that have no certificate and
	// speak no TLS (Kubernetes' httpGet, as Envoy Gateway's deployment
	// probes port 8080), and the /json port can be kept off a network by
	// itself. Its TLS is gRPC's: the client certificate is required at
	// the handshake, so no unauthenticated byte reaches the handler.
	var jsonTLS *tls.Config
	if cfg.JSONAddr != "" {
		jsonWeb = httpServer(gate.handler(publicOnly(srv.Handler())))
		if cfg.GRPCTLS != nil {
			if jsonTLS, err = serverTLS(*cfg.GRPCTLS, logger, "h2", "http/1.1"); err != nil {
				return fmt.Errorf("%w: %w", errConfig, err)
			}
		}
	}
	if cfg.JSONOff {
		reason := "JSON_ADDR is off"
		if cfg.JSONAddr == "" && cfg.GRPCTLS != nil && cfg.GRPCTLS.ClientCA != "" {
			reason = "gRPC requires client certificates and JSON_ADDR is unset: set it to serve /json over TLS with them"
		}
		logger.Info("POST /json is not served", "reason", reason)
	}

	if breaker != nil {
		// Before the listeners, so that no probe passes and no call comes
		// before the store can decide at full speed (warm.go).
		stopWarm := warmUp(ctx, breaker, logger, cfg.RedisURL)
		defer stopWarm()
	}
	var lns []net.Listener
	listen := func(name, addr string, conns int) (net.Listener, error) {
		network := "tcp"
		if name == "GRPC_UDS" {
			network = "unix"
			removeStaleSocket(addr)
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		lns = append(lns, ln)
		return netutil.LimitListener(ln, conns), nil
	}
	gname, gaddr := "GRPC_ADDR", cfg.GRPCAddr
	if cfg.GRPCUDS != "" {
		gname, gaddr = "GRPC_UDS", cfg.GRPCUDS
	}
	gln, err := listen(gname, gaddr, maxGRPCConns)
	if err != nil {
		return err
	}
	hln, err := listen("HTTP_ADDR", cfg.HTTPAddr, maxHTTPConns)
	if err != nil {
		return err
	}
	var dln, jln net.Listener
	if debug != nil {
		if dln, err = listen("DEBUG_ADDR", cfg.DebugAddr, maxDebugConns); err != nil {
			return err
		}
	}
	if jsonWeb != nil {
		if jln, err = listen("JSON_ADDR", cfg.JSONAddr, maxHTTPConns); err != nil {
			return err
		}
	}
	errc := make(chan error, 4)
	go func() { errc <- gs.Serve(gln) }()
	web.Handler = tr.handler(web.Handler) // POST /json's spans when tracing
	go func() { errc <- web.Serve(hln) }()
	debugAddr, jsonAddr := "", ""
	if debug != nil {
		debugAddr = dln.Addr().String()
		go func() { errc <- debug.Serve(dln) }()
	}
	if jsonWeb != nil {
		jsonAddr = jln.Addr().String()
		if jsonTLS != nil {
			jln = tls.NewListener(jln, jsonTLS) // inside the bound: a handshake holds a slot
		}
		jsonWeb.Handler = tr.handler(jsonWeb.Handler)
		go func() { errc <- jsonWeb.Serve(jln) }()
	}
	logger.Info("floodgate serving", "grpc", gln.Addr().String(), "http", hln.Addr().String(), "debug", debugAddr, "json", jsonAddr,
		"config_dir", cfg.ConfigDir, "redis", cfg.RedisURL != "", "decision_timeout", cfg.DecisionTimeout, "denial_cache", cfg.DenialCache)
	if hooks.json != nil && jsonAddr != "" {
		hooks.json(jsonAddr)
	}
	if hooks.ready != nil {
		hooks.ready(gln.Addr().String(), hln.Addr().String(), debugAddr)
	}

	var served error
	select {
	case served = <-errc:
	case <-ctx.Done():
	}
	logger.Info("shutting down: in-flight calls finish", "timeout", cfg.ShutdownTimeout)
	srv.Close() // not serving: load balancers drain it; requests still answer
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	errs := []error{served, web.Shutdown(sctx)}
	for _, s := range []*http.Server{debug, jsonWeb} {
		if s != nil {
			errs = append(errs, s.Shutdown(sctx))
		}
	}
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
		<-stopped
	}
	if errors.Is(served, http.ErrServerClosed) || errors.Is(served, grpc.ErrServerStopped) {
		errs[0] = nil
	}
	return errors.Join(errs...)
}

// withoutJSON serves h but POST /json, which answers 404 with where it
// went: JSON_ADDR, or nowhere.
func withoutJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/json" {
			http.Error(w, "floodgate: /json is not served on this listener (JSON_ADDR)", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// publicOnly serves /json and /healthcheck from h and nothing else: with
// DEBUG_ADDR set, the configuration and the metrics live there alone, as
// envoyproxy/ratelimit keeps them on its debug port.
func publicOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/json" && r.URL.Path != "/healthcheck" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// removeStaleSocket removes the unix socket at path when nothing listens
// on it: a socket file left by a process that was killed would make the
// listen fail. Anything else at path is left for the listen to report.
func removeStaleSocket(path string) {
	if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeSocket == 0 {
		return
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close() // in use: the listen reports it
		return
	}
	os.Remove(path)
}
