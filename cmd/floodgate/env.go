package main

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// sharedEnv is the part of the environment that the service and the
// subcommands read alike: where the limits are kept and which
// configuration they come from. Both read it with readEnv, so that a
// subcommand run beside the service (in its container) finds the Redis,
// the keys and the limits that the service finds.
type sharedEnv struct {
	RedisURL     string // REDIS_URL and its companions (see redisURL): a redisstore URL; empty means none
	RedisPrefix  string // CACHE_KEY_PREFIX: the Redis key prefix; empty means redisstore's
	ConfigDir    string // CONFIG_DIR, or RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (not under CONFIG_TYPE=GRPC_XDS_SOTW); empty if neither
	MergeDomains bool   // MERGE_DOMAIN_CONFIG
	ShadowMode   bool   // SHADOW_MODE: every limit in shadow mode
	// PerSecondURL is the Redis of the limits whose window is one second,
	// with REDIS_PERSECOND=true: REDIS_PERSECOND_URL and its companions,
	// read as REDIS_URL's; empty means none, every limit in RedisURL.
	PerSecondURL string
	// Notes are upstream's settings that were set and mean nothing
	// here (its Redis pools', its directory watching's), each with why:
	// the service logs them once at start.
	Notes []settingNote
}

// settingNote is a setting accepted without effect, and why.
type settingNote struct{ Name, Value, Why string }

// perSecondNames are envoyproxy/ratelimit's settings of its per-second
// Redis, beside REDIS_PERSECOND: refused without it, as upstream would
// ignore them.
var perSecondNames = []string{
	"REDIS_PERSECOND_URL", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS",
	"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_TIMEOUT",
}

// redisTuning checks upstream's settings of its Redis connection pools
// (radix's), which floodgate's client, one multiplexed connection per
// Redis node, has no use for: a well-formed value is accepted, noted in
// notes to be logged at start; a malformed one, or one that asks for
// what floodgate cannot do, is an error.
func redisTuning(getenv func(string) string, perSecond bool, notes *[]settingNote) []error {
	var errs []error
	prefixes := []string{"REDIS_"}
	if perSecond {
		prefixes = append(prefixes, "REDIS_PERSECOND_")
	}
	for _, p := range prefixes {
		for _, t := range []struct {
			name, kind, why string
		}{
			{"POOL_SIZE", "count", "the store multiplexes one connection per Redis node: there is no pool to size"},
			{"PIPELINE_WINDOW", "duration", "the store groups concurrent checks into one script call by itself"},
			{"PIPELINE_LIMIT", "count", "the store groups concurrent checks into one script call by itself"},
			{"CLUSTER_PIPELINE_PARALLELISM", "count", "the store sends each Cluster slot's checks concurrently by itself"},
		} {
			name := p + t.name
			v := getenv(name)
			if v == "" {
				continue
			}
			var err error
			if t.kind == "count" {
				var n int
				if n, err = strconv.Atoi(v); err == nil && n < 0 {
					err = errors.New("negative")
				}
			} else {
				_, err = time.ParseDuration(v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a %s", name, v, map[string]string{"count": "whole number, 0 or more", "duration": "duration such as 150us"}[t.kind]))
				continue
			}
			*notes = append(*notes, settingNote{name, v, t.why})
		}
		name := p + "POOL_ON_EMPTY_BEHAVIOR"
		switch v := getenv(name); strings.ToUpper(v) {
		case "":
		case "WAIT":
			*notes = append(*notes, settingNote{name, v, "there is no pool to run empty; a decision waits at most DECISION_TIMEOUT"})
		case "CREATE", "ERROR":
			// envoyproxy/ratelimit refuses them too (radix v4 has neither).
			errs = append(errs, fmt.Errorf("%s: %q is not supported (as upstream, which refuses it since radix v4): there is no pool; a decision waits at most DECISION_TIMEOUT. Unset it or set WAIT", name, v))
		default:
			errs = append(errs, fmt.Errorf("%s: %q is not WAIT", name, v))
		}
	}
	// Upstream waits for Redis at start, retrying with a backoff;
	// floodgate serves at once (each descriptor takes its failure mode)
	// and redials every 500ms until Redis answers.
	for _, name := range []string{"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"} {
		v := getenv(name)
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d < 0:
			errs = append(errs, fmt.Errorf("%s: %q is not a duration such as 30s", name, v))
		case name == "REDIS_STARTUP_MAX_ELAPSED_TIME" && d > 0:
			errs = append(errs, fmt.Errorf("%s: %q is not supported: the service does not wait for Redis at start, nor exit without it; it serves by the failure modes and redials every 500ms. Set 0 or unset it", name, v))
		case d > 0:
			*notes = append(*notes, settingNote{name, v, "the service does not wait for Redis at start: it serves by the failure modes and redials every 500ms"})
		}
	}
	if v := getenv("EXPIRATION_JITTER_MAX_SECONDS"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("EXPIRATION_JITTER_MAX_SECONDS: %q is not a whole number of seconds, 0 or more", v))
		} else if n > 0 {
			// Upstream adds up to this much to its counters' expiries, to
			// spread them; it lengthens keys' lives and changes no answer.
			*notes = append(*notes, settingNote{"EXPIRATION_JITTER_MAX_SECONDS", v, "each key expires when its state stops weighing, with no jitter: a jitter would only keep keys longer, and change no answer"})
		}
	}
	return errs
}

// readEnv reads the shared environment. It returns one error per bad
// variable, each starting with the variable's name; none quotes a
// password.
func readEnv(getenv func(string) string) (sharedEnv, []error) {
	var e sharedEnv
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, a...)...))
	}
	boolean := func(name string) bool { return envBool(getenv, bad, name) }

	e.ConfigDir = getenv("CONFIG_DIR")
	xds := strings.EqualFold(getenv("CONFIG_TYPE"), "GRPC_XDS_SOTW") // the configuration comes from an xDS server
	if e.ConfigDir == "" && getenv("RUNTIME_ROOT") != "" && !xds {
		// envoyproxy/ratelimit reads
		// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, the last
		// one config by default, and ignores them under xDS.
		app := getenv("RUNTIME_APPDIRECTORY")
		if app == "" {
			app = "config"
		}
		e.ConfigDir = filepath.Join(getenv("RUNTIME_ROOT"), getenv("RUNTIME_SUBDIRECTORY"), app)
	}
	e.MergeDomains = boolean("MERGE_DOMAIN_CONFIG")
	e.ShadowMode = boolean("SHADOW_MODE")
	// Upstream's choices of how to watch the directory: floodgate always
	// watches it all (a swap of RUNTIME_ROOT, or of any symbolic link on
	// the path, included), and never reads dot files, which are editors'
	// swap files and the ConfigMap's own (..data).
	for _, w := range []struct{ name, why string }{
		{"RUNTIME_WATCH_ROOT", "the directory is always watched, a swap of RUNTIME_ROOT or of any symbolic link on its path included"},
		{"RUNTIME_IGNOREDOTFILES", "dot files are never read (editors' swap files, a ConfigMap's ..data): as upstream with true"},
	} {
		if v := getenv(w.name); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				bad(w.name, "%q is not true or false", v)
				continue
			}
			e.Notes = append(e.Notes, settingNote{w.name, v, w.why})
		}
	}

	// The TLS files serve both Redis, each with TLS on; a Redis without
	// TLS leaves them to the other.
	perSecond := boolean("REDIS_PERSECOND")
	tlsOf := func(p string) bool {
		return envTrue(getenv(p+"TLS")) || strings.HasPrefix(getenv(p+"URL"), "rediss://")
	}
	if (getenv("REDIS_TLS_CLIENT_CERT") == "") != (getenv("REDIS_TLS_CLIENT_KEY") == "") {
		bad("REDIS_TLS_CLIENT_CERT", "and REDIS_TLS_CLIENT_KEY go together: set both or neither")
	}
	if v := getenv("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			bad("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "%q is not true or false", v)
		}
	}
	redis := func(p string, filesElsewhere bool) string {
		name := p + "URL"
		u, err := redisURLOf(getenv, p, filesElsewhere)
		switch {
		case err != nil:
			bad(name, "%s", redisopt.Redact(err.Error(), getenv(name)))
		case u != "":
			if err := (redisstore.Options{URL: u}).Validate(); err != nil {
				bad(name, "%s", redisopt.Redact(err.Error(), getenv(name), u))
			}
		}
		return u
	}
	e.RedisURL = redis("REDIS_", perSecond && tlsOf("REDIS_PERSECOND_"))
	if perSecond {
		e.PerSecondURL = redis("REDIS_PERSECOND_", true) // the main Redis reports unused TLS files
		switch {
		case getenv("REDIS_PERSECOND_URL") == "":
			bad("REDIS_PERSECOND", "is true: set REDIS_PERSECOND_URL to the Redis of the limits per second (floodgate assumes no default socket)")
		case getenv("REDIS_URL") == "":
			bad("REDIS_PERSECOND", "is true but REDIS_URL is empty: the other limits would be kept in memory; set REDIS_URL")
		}
	} else {
		for _, name := range perSecondNames {
			if v := getenv(name); v != "" && !strings.EqualFold(v, "false") {
				bad(name, "is set but REDIS_PERSECOND is not true: set REDIS_PERSECOND=true for a second Redis for the limits per second, or unset it")
			}
		}
	}
	errs = append(errs, redisTuning(getenv, perSecond, &e.Notes)...)
	e.RedisPrefix = getenv("CACHE_KEY_PREFIX")
	if err := (redisstore.Options{URL: "redis://localhost", Prefix: e.RedisPrefix}).Validate(); err != nil {
		bad("CACHE_KEY_PREFIX", "%v", err)
	}
	return e, errs
}

// redisURL reads REDIS_URL in redisstore's forms, or in
// envoyproxy/ratelimit's: HOST:PORT without a scheme (several, comma
// separated, for REDIS_TYPE cluster; the master's name first for
// sentinel), optionally after USER:PASSWORD@ or PASSWORD@ (taken as
// written, unescaped), or a socket's path (REDIS_SOCKET_TYPE unix), with
// REDIS_AUTH (PASSWORD or USER:PASSWORD) as the password and REDIS_TLS,
// and the TLS files and the sentinels' password (redisExtras). Beside a
// URL, those variables must agree with it or be unset: none is
// dropped unseen. Its errors quote no password.
func redisURL(getenv func(string) string) (string, error) {
	return redisURLOf(getenv, "REDIS_", false)
}

// redisURLOf is redisURL for the variables named p+"URL", p+"TYPE",
// p+"AUTH", p+"TLS", p+"SOCKET_TYPE" and p+"SENTINEL_AUTH": p is "REDIS_"
// for the Redis of every limit, "REDIS_PERSECOND_" for the per-second
// one. filesElsewhere says that the REDIS_TLS_* files are used by the
// other Redis, so that this one, without TLS, need not refuse them.
func redisURLOf(getenv func(string) string, p string, filesElsewhere bool) (string, error) {
	u, err := baseRedisURL(getenv, p)
	if err != nil || u == "" {
		return u, err
	}
	return redisExtras(u, getenv, p, filesElsewhere)
}

// baseRedisURL is redisURLOf without the TLS files and the sentinels'
// credentials.
func baseRedisURL(getenv func(string) string, p string) (string, error) {
	nURL, nType, nTLS, nSocket, nAuth := p+"URL", p+"TYPE", p+"TLS", p+"SOCKET_TYPE", p+"AUTH"
	v := getenv(nURL)
	typ := strings.ToLower(getenv(nType))
	switch typ {
	case "", "single", "cluster", "sentinel":
	default:
		return "", fmt.Errorf("%s %q is not single, sentinel or cluster", nType, getenv(nType))
	}
	tls := false
	if t := getenv(nTLS); t != "" {
		var err error
		if tls, err = strconv.ParseBool(t); err != nil {
			return "", fmt.Errorf("%s %q is not true or false", nTLS, t)
		}
	}
	st := strings.ToLower(getenv(nSocket))
	if st != "" && st != "tcp" && st != "unix" {
		return "", fmt.Errorf("%s %q is not tcp or unix", nSocket, getenv(nSocket))
	}
	if v == "" {
		return "", nil
	}
	if strings.Contains(v, "://") {
		// A URL says it all: the variables that would say it otherwise
		// must not be dropped unseen.
		switch {
		case tls && !strings.HasPrefix(v, "rediss://"):
			return "", fmt.Errorf("%s is true but %s is not a rediss:// URL; write rediss://", nTLS, nURL)
		case getenv(nAuth) != "":
			return "", fmt.Errorf("%s is set beside a %s URL; write the password in the URL (redis://user:password@host:port)", nAuth, nURL)
		case st == "unix" && !strings.HasPrefix(v, "unix://"):
			return "", fmt.Errorf("%s is unix but %s is not a unix:// URL", nSocket, nURL)
		case typ == "sentinel" && !strings.Contains(v, "master_set="):
			return "", fmt.Errorf("%s is sentinel but %s has no ?master_set=; write it in the URL", nType, nURL)
		}
		return v, nil
	}
	// Credentials before the addresses: everything up to the last @ (a
	// password may hold one, an address never does). A socket's path is
	// taken whole: it may hold an @.
	auth := getenv(nAuth)
	if i := strings.LastIndex(v, "@"); i >= 0 && !strings.HasPrefix(v, "/") {
		if auth != "" {
			return "", fmt.Errorf("%s is set beside credentials in %s (USER:PASSWORD@HOST:PORT); give one of them", nAuth, nURL)
		}
		auth, v = v[:i], v[i+1:]
	}
	var u url.URL
	if st == "unix" || strings.HasPrefix(v, "/") {
		// envoyproxy/ratelimit's socket path.
		if tls {
			return "", fmt.Errorf("%s is true for a unix socket; TLS is for TCP", nTLS)
		}
		if abs, err := filepath.Abs(v); err == nil {
			v = abs
		}
		u = url.URL{Scheme: "unix", Path: v}
	} else {
		u = url.URL{Scheme: "redis"}
		if tls {
			u.Scheme = "rediss"
		}
		parts := strings.Split(v, ",")
		q := url.Values{}
		if typ == "sentinel" {
			if len(parts) < 2 {
				return "", fmt.Errorf("%s sentinel wants MASTER,HOST:PORT[,HOST:PORT...], got %q", nType, v)
			}
			q.Set("master_set", parts[0])
			parts = parts[1:]
		}
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
		u.Host, u.RawQuery = parts[0], q.Encode()
	}
	if auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	return u.String(), nil
}

// redisExtras adds to the redisstore URL u what envoyproxy/ratelimit
// reads beside REDIS_URL and a URL's scheme, host and credentials cannot
// say: the client certificate (REDIS_TLS_CLIENT_CERT, _KEY), the CA
// added to the system's roots (REDIS_TLS_CACERT), a chain verified
// without its name (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION), the
// sentinels' password (REDIS_SENTINEL_AUTH, PASSWORD or USER:PASSWORD)
// and, with REDIS_TLS=true under REDIS_TYPE=sentinel, TLS to the
// sentinels too, as upstream dials them. They become redisstore's query
// parameters (internal/redisopt's tls.go). Upstream reads the TLS files
// only when REDIS_TLS (or REDIS_PERSECOND_TLS) is true, for both Redis,
// and the sentinels' password only for REDIS_TYPE=sentinel; here one set
// where it means nothing is refused. p names the variables as in
// redisURLOf.
func redisExtras(u string, getenv func(string) string, p string, filesElsewhere bool) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return u, nil // the store's validation says why, without the password
	}
	nURL, nTLS, nType, nSentinel := p+"URL", p+"TLS", p+"TYPE", p+"SENTINEL_AUTH"
	q := pu.Query()
	tlsOn := pu.Scheme == "rediss"
	sentinel := q.Get("master_set") != ""
	var errs []error
	changed := false
	set := func(env, param, v string) {
		switch {
		case v == "":
		case q.Has(param):
			errs = append(errs, fmt.Errorf("%s is set beside ?%s= in %s; give one of them", env, param, nURL))
		default:
			q.Set(param, v)
			changed = true
		}
	}
	unused := func(env string) {
		if !filesElsewhere {
			errs = append(errs, fmt.Errorf("%s is set but %s is not true (nor %s rediss://)", env, nTLS, nURL))
		}
	}
	for _, f := range []struct{ env, param string }{
		{"REDIS_TLS_CLIENT_CERT", "tls_cert"}, {"REDIS_TLS_CLIENT_KEY", "tls_key"}, {"REDIS_TLS_CACERT", "tls_ca"},
	} {
		switch v := getenv(f.env); {
		case v != "" && !tlsOn:
			unused(f.env)
		default:
			set(f.env, f.param, v)
		}
	}
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION's value and the pairing of
	// the certificate and its key are checked once, by readEnv.
	if b, err := strconv.ParseBool(getenv("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")); err == nil && b {
		if tlsOn {
			set("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "tls_skip_hostname", "true")
		} else {
			unused("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	}
	if v := getenv(p + "TIMEOUT"); v != "" {
		// Upstream's bound of a connection attempt and of each command's
		// I/O: the URL's dial_timeout and write_timeout (a decision is
		// bounded by DECISION_TIMEOUT whatever this says).
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%sTIMEOUT %q is not a positive duration such as 10s", p, v))
		} else {
			set(p+"TIMEOUT", "dial_timeout", d.String())
			set(p+"TIMEOUT", "write_timeout", d.String())
		}
	}
	if tlsOn && sentinel && envTrue(getenv(nTLS)) {
		set(nTLS, "sentinel_tls", "true")
	}
	if auth := getenv(nSentinel); auth != "" {
		if !sentinel {
			errs = append(errs, fmt.Errorf("%s is set but %s is not sentinel (nor %s ?master_set=)", nSentinel, nType, nURL))
		} else if user, pass, ok := strings.Cut(auth, ":"); ok {
			set(nSentinel, "sentinel_user", user)
			set(nSentinel, redisopt.ParamSentinelPassword, pass)
		} else {
			set(nSentinel, redisopt.ParamSentinelPassword, auth)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	if !changed {
		return u, nil
	}
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}

// envTrue reports whether v is a true boolean as strconv.ParseBool reads
// it.
func envTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// envBool reads the boolean variable name as envoyproxy/ratelimit reads
// it (strconv.ParseBool; unset is false), and reports any other value to
// bad.
func envBool(getenv func(string) string, bad func(name, format string, a ...any), name string) bool {
	v := getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		bad(name, "%q is not true or false", v)
	}
	return b
}
