package bank

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// FailureMode is what a route does when the shared store is unavailable.
type FailureMode string

// The failure modes a route may take.
const (
	FailClosed FailureMode = "closed" // deny with 429
	FailOpen   FailureMode = "open"   // allow, unlimited
	FailLocal  FailureMode = "local"  // per-replica in-memory limits
)

// Config is the bank service's configuration. Every field maps one-to-one
// to an environment variable, named in its comment.
type Config struct {
	ListenAddr string // LISTEN_ADDR, default ":8080"
	// MetricsAddr is where /metrics is served, apart from the API: the
	// decision counter's policy label would tell an attacker which limit
	// refused an opaque login, so it must not be public.
	MetricsAddr    string   // METRICS_ADDR, default "127.0.0.1:9090" (loopback)
	RedisURL       string   // REDIS_URL; empty: in-memory limits, per process
	TrustedProxies []string // TRUSTED_PROXIES, comma-separated CIDRs or addresses
	TokenSecret    string   // TOKEN_SECRET, at least 32 bytes; required with REDIS_URL
	UsersFile      string   // USERS_FILE; empty: the built-in demo directory
	// LimitsFile, if set, is an envoy-format YAML file (domain "bank",
	// one descriptor key per limit name: pix, statement, login-ip,
	// login-account, login-net, global-ip) whose limits replace the
	// LIMIT_* ones while the service runs, reloaded when it changes.
	LimitsFile      string        // LIMITS_FILE; empty: the LIMIT_* variables alone
	DecisionTimeout time.Duration // DECISION_TIMEOUT, default 50ms
	// DenialCacheSize is how many denials each replica remembers, so that
	// a client hammering a blocked key costs no Redis call until its
	// Retry-After (floodgate.Options.DenialCacheSize); 0 turns it off.
	DenialCacheSize int        // DENIAL_CACHE_SIZE, default 10000 (about 3 MB)
	LogLevel        slog.Level // LOG_LEVEL: debug, info, warn, error; default info
	LogFormat       string     // LOG_FORMAT: text or json; default text

	// LoginConcurrency bounds the password checks (bcrypt) that run at
	// once, so that a burst of logins cannot starve the rest of the
	// process of CPU. LoginQueue bounds the logins that wait for a check;
	// a login over both gets 503 with Retry-After.
	// The default leaves one CPU to the rest of the process (the network,
	// the limiter's store calls), whose goroutines would otherwise wait
	// for bcrypt to be preempted.
	LoginConcurrency int // LOGIN_CONCURRENCY, default GOMAXPROCS-1, at least 1
	LoginQueue       int // LOGIN_QUEUE, default 32

	// InsecureCookies drops the Secure attribute of the device cookie, for
	// plain-HTTP development only. The service cannot tell HTTPS by itself
	// behind a TLS-terminating proxy, so the cookie is Secure by default.
	InsecureCookies bool // INSECURE_COOKIES=true, default false

	PIX          floodgate.Rule // LIMIT_PIX, default 10/1m, per account
	Statement    floodgate.Rule // LIMIT_STATEMENT, default 30/1m, per account
	LoginIP      floodgate.Rule // LIMIT_LOGIN_IP, default 10/10m, per client IP
	LoginAccount floodgate.Rule // LIMIT_LOGIN_ACCOUNT, default 5/10m, per account or known device
	GlobalIP     floodgate.Rule // LIMIT_GLOBAL_IP, default 3000/1m, per client IP on every route
	// LoginNet bounds the logins of a whole IPv6 network: a client that
	// holds a /48 holds 65,536 /64s, each with its own LoginIP budget.
	LoginNet       floodgate.Rule // LIMIT_LOGIN_NET, default 100/10m, per IPv6 network of LoginNetPrefix bits
	LoginNetPrefix int            // LOGIN_NET_PREFIX, default 48
	// IPv6Prefix is how many leading bits of an IPv6 client make its key
	// for the per-IP limits.
	IPv6Prefix int // IPV6_PREFIX, default 64

	FailurePIX       FailureMode // FAILURE_PIX, default closed
	FailureStatement FailureMode // FAILURE_STATEMENT, default open
	FailureLogin     FailureMode // FAILURE_LOGIN, default closed
}

// minSecret is the shortest TOKEN_SECRET accepted, and minDistinct the
// fewest distinct bytes: a repeated character or a short repeated pattern
// is not a secret. The review suggested 16 distinct bytes, but hex has
// only 16 symbols: by simulation (200,000 draws), 16 would refuse 93% of
// random 32-hex-digit secrets and 23% of 64-digit ones (openssl rand -hex
// 32). 10 refuses 0.01% of the former and none of the latter, while still
// refusing any value built from a handful of characters.
const (
	minSecret   = 32
	minDistinct = 10
)

// distinctBytes counts the distinct bytes of s.
func distinctBytes(s string) int {
	var seen [256]bool
	n := 0
	for i := 0; i < len(s); i++ {
		if !seen[s[i]] {
			seen[s[i]] = true
			n++
		}
	}
	return n
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv in
// main) and validates it, listing every problem at once, each naming its
// variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{ListenAddr: ":8080", MetricsAddr: "127.0.0.1:9090", DecisionTimeout: 50 * time.Millisecond, LogFormat: "text",
		DenialCacheSize: 10000, LoginNetPrefix: 48, IPv6Prefix: 64,
		LoginConcurrency: max(1, runtime.GOMAXPROCS(0)-1), LoginQueue: 32}
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	str := func(name string, dst *string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	str("LISTEN_ADDR", &c.ListenAddr)
	str("METRICS_ADDR", &c.MetricsAddr)
	if _, port, _ := net.SplitHostPort(c.MetricsAddr); c.MetricsAddr == c.ListenAddr && port != "0" {
		bad("METRICS_ADDR", "%q is LISTEN_ADDR: metrics must not be served on the public listener", c.MetricsAddr)
	}
	str("REDIS_URL", &c.RedisURL)
	str("TOKEN_SECRET", &c.TokenSecret)
	str("USERS_FILE", &c.UsersFile)
	str("LIMITS_FILE", &c.LimitsFile)
	str("LOG_FORMAT", &c.LogFormat)
	if v := getenv("TRUSTED_PROXIES"); strings.TrimSpace(v) != "" {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if _, err := netip.ParsePrefix(p); err != nil {
				if _, err := netip.ParseAddr(p); err != nil {
					bad("TRUSTED_PROXIES", "%q is neither a CIDR nor an IP address", p)
					continue
				}
			}
			c.TrustedProxies = append(c.TrustedProxies, p)
		}
	}
	if v := getenv("DECISION_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 10*time.Second {
			bad("DECISION_TIMEOUT", "%q is not a duration between 0 and 10s, such as 50ms", v)
		}
		c.DecisionTimeout = d
	}
	count := func(name string, least, most int, dst *int) {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < least || n > most {
				bad(name, "%q is not an integer from %d to %d", v, least, most)
				return
			}
			*dst = n
		}
	}
	switch v := getenv("INSECURE_COOKIES"); v {
	case "", "false":
	case "true":
		c.InsecureCookies = true
	default:
		bad("INSECURE_COOKIES", "%q is not true or false", v)
	}
	count("LOGIN_CONCURRENCY", 1, 1<<16, &c.LoginConcurrency)
	count("LOGIN_QUEUE", 0, 1<<16, &c.LoginQueue)
	count("DENIAL_CACHE_SIZE", 0, 10_000_000, &c.DenialCacheSize)
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad("LOG_LEVEL", "%q is not one of debug, info, warn, error", v)
		}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("LOG_FORMAT", "%q is not text or json", c.LogFormat)
	}
	limit := func(name, policy, def string, dst *floodgate.Rule) {
		spec := def
		if v := getenv(name); v != "" {
			spec = v
		}
		r, err := floodgate.ParseLimit(policy, spec, floodgate.SlidingWindow)
		if err != nil {
			bad(name, "%v", err)
		}
		*dst = r
	}
	limit("LIMIT_PIX", "pix", "10/1m", &c.PIX)
	limit("LIMIT_STATEMENT", "statement", "30/1m", &c.Statement)
	limit("LIMIT_LOGIN_IP", "login-ip", "10/10m", &c.LoginIP)
	limit("LIMIT_LOGIN_ACCOUNT", "login-account", "5/10m", &c.LoginAccount)
	limit("LIMIT_GLOBAL_IP", "global-ip", "3000/1m", &c.GlobalIP)
	limit("LIMIT_LOGIN_NET", "login-net", "100/10m", &c.LoginNet)
	count("LOGIN_NET_PREFIX", 1, 128, &c.LoginNetPrefix)
	count("IPV6_PREFIX", 1, 128, &c.IPv6Prefix)
	mode := func(name string, def FailureMode, dst *FailureMode) {
		*dst = def
		switch v := FailureMode(getenv(name)); v {
		case "":
		case FailClosed, FailOpen, FailLocal:
			*dst = v
		default:
			bad(name, "%q is not closed, open or local", v)
		}
	}
	mode("FAILURE_PIX", FailClosed, &c.FailurePIX)
	mode("FAILURE_STATEMENT", FailOpen, &c.FailureStatement)
	mode("FAILURE_LOGIN", FailClosed, &c.FailureLogin)
	switch {
	case c.RedisURL != "" && c.TokenSecret == "":
		bad("TOKEN_SECRET", "required when REDIS_URL is set: replicas must share it")
	case c.TokenSecret != "" && len(c.TokenSecret) < minSecret:
		bad("TOKEN_SECRET", "%d bytes is too short; use at least %d random bytes", len(c.TokenSecret), minSecret)
	case c.TokenSecret != "" && distinctBytes(c.TokenSecret) < minDistinct:
		bad("TOKEN_SECRET", "has only %d distinct bytes, so it is not random; use at least %d random bytes, such as the output of openssl rand -hex 32", distinctBytes(c.TokenSecret), minSecret)
	}
	return c, errors.Join(errs...)
}

// LogValue prints the configuration with its secret redacted.
func (c Config) LogValue() slog.Value {
	redis := "in-memory (limits per process)"
	if c.RedisURL != "" {
		redis = "set"
	}
	return slog.GroupValue(
		slog.String("listen_addr", c.ListenAddr),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.String("redis", redis),
		slog.Any("trusted_proxies", c.TrustedProxies),
		slog.Bool("token_secret_set", c.TokenSecret != ""),
		slog.String("users_file", c.UsersFile),
		slog.String("limits_file", c.LimitsFile),
		slog.Duration("decision_timeout", c.DecisionTimeout),
		slog.Int("denial_cache_size", c.DenialCacheSize),
		slog.Int("login_concurrency", c.LoginConcurrency),
		slog.Int("login_queue", c.LoginQueue),
		slog.Bool("insecure_cookies", c.InsecureCookies),
		slog.String("pix", c.PIX.String()+" fail-"+string(c.FailurePIX)),
		slog.String("statement", c.Statement.String()+" fail-"+string(c.FailureStatement)),
		slog.String("login_ip", c.LoginIP.String()+" fail-"+string(c.FailureLogin)),
		slog.String("login_account", c.LoginAccount.String()),
		slog.String("global_ip", c.GlobalIP.String()),
		slog.String("login_net", c.LoginNet.String()+fmt.Sprintf(" per IPv6 /%d", c.LoginNetPrefix)),
		slog.Int("ipv6_prefix", c.IPv6Prefix),
	)
}
