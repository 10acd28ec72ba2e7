package main

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

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

	u, err := redisURL(getenv)
	switch {
	case err != nil:
		bad("REDIS_URL", "%s", redisopt.Redact(err.Error(), getenv("REDIS_URL")))
	case u != "":
		if err := (redisstore.Options{URL: u}).Validate(); err != nil {
			bad("REDIS_URL", "%s", redisopt.Redact(err.Error(), getenv("REDIS_URL"), u))
		}
	}
	e.RedisURL = u
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
	u, err := baseRedisURL(getenv)
	if err != nil || u == "" {
		return u, err
	}
	return redisExtras(u, getenv)
}

// baseRedisURL is redisURL without the TLS files and the sentinels'
// credentials.
func baseRedisURL(getenv func(string) string) (string, error) {
	v := getenv("REDIS_URL")
	typ := strings.ToLower(getenv("REDIS_TYPE"))
	switch typ {
	case "", "single", "cluster", "sentinel":
	default:
		return "", fmt.Errorf("REDIS_TYPE %q is not single, sentinel or cluster", getenv("REDIS_TYPE"))
	}
	tls := false
	if t := getenv("REDIS_TLS"); t != "" {
		var err error
		if tls, err = strconv.ParseBool(t); err != nil {
			return "", fmt.Errorf("REDIS_TLS %q is not true or false", t)
		}
	}
	st := strings.ToLower(getenv("REDIS_SOCKET_TYPE"))
	if st != "" && st != "tcp" && st != "unix" {
		return "", fmt.Errorf("REDIS_SOCKET_TYPE %q is not tcp or unix", getenv("REDIS_SOCKET_TYPE"))
	}
	if v == "" {
		return "", nil
	}
	if strings.Contains(v, "://") {
		// A URL says it all: the variables that would say it otherwise
		// must not be dropped unseen.
		switch {
		case tls && !strings.HasPrefix(v, "rediss://"):
			return "", errors.New("REDIS_TLS is true but REDIS_URL is not a rediss:// URL; write rediss://")
		case getenv("REDIS_AUTH") != "":
			return "", errors.New("REDIS_AUTH is set beside a REDIS_URL URL; write the password in the URL (redis://user:password@host:port)")
		case st == "unix" && !strings.HasPrefix(v, "unix://"):
			return "", errors.New("REDIS_SOCKET_TYPE is unix but REDIS_URL is not a unix:// URL")
		case typ == "sentinel" && !strings.Contains(v, "master_set="):
			return "", errors.New("REDIS_TYPE is sentinel but REDIS_URL has no ?master_set=; write it in the URL")
		}
		return v, nil
	}
	// Credentials before the addresses: everything up to the last @ (a
	// password may hold one, an address never does). A socket's path is
	// taken whole: it may hold an @.
	auth := getenv("REDIS_AUTH")
	if i := strings.LastIndex(v, "@"); i >= 0 && !strings.HasPrefix(v, "/") {
		if auth != "" {
			return "", errors.New("REDIS_AUTH is set beside credentials in REDIS_URL (USER:PASSWORD@HOST:PORT); give one of them")
		}
		auth, v = v[:i], v[i+1:]
	}
	var u url.URL
	if st == "unix" || strings.HasPrefix(v, "/") {
		// envoyproxy/ratelimit's socket path.
		if tls {
			return "", errors.New("REDIS_TLS is true for a unix socket; TLS is for TCP")
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
				return "", fmt.Errorf("REDIS_TYPE sentinel wants MASTER,HOST:PORT[,HOST:PORT...], got %q", v)
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
// only when REDIS_TLS is true, and the sentinels' password only for
// REDIS_TYPE=sentinel; here one set where it means nothing is refused.
func redisExtras(u string, getenv func(string) string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return u, nil // the store's validation says why, without the password
	}
	q := pu.Query()
	tlsOn := pu.Scheme == "rediss"
	sentinel := q.Get("master_set") != ""
	var errs []error
	changed := false
	set := func(env, param, v string) {
		switch {
		case v == "":
		case q.Has(param):
			errs = append(errs, fmt.Errorf("%s is set beside ?%s= in REDIS_URL; give one of them", env, param))
		default:
			q.Set(param, v)
			changed = true
		}
	}
	for _, f := range []struct{ env, param string }{
		{"REDIS_TLS_CLIENT_CERT", "tls_cert"}, {"REDIS_TLS_CLIENT_KEY", "tls_key"}, {"REDIS_TLS_CACERT", "tls_ca"},
	} {
		v := getenv(f.env)
		if v != "" && !tlsOn {
			errs = append(errs, fmt.Errorf("%s is set but REDIS_TLS is not true (nor REDIS_URL rediss://)", f.env))
			continue
		}
		set(f.env, f.param, v)
	}
	if (getenv("REDIS_TLS_CLIENT_CERT") == "") != (getenv("REDIS_TLS_CLIENT_KEY") == "") {
		errs = append(errs, errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both or neither"))
	}
	if v := getenv("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"); v != "" {
		switch b, err := strconv.ParseBool(v); {
		case err != nil:
			errs = append(errs, fmt.Errorf("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION %q is not true or false", v))
		case b && !tlsOn:
			errs = append(errs, errors.New("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION is true but REDIS_TLS is not true (nor REDIS_URL rediss://)"))
		case b:
			set("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "tls_skip_hostname", "true")
		}
	}
	if tlsOn && sentinel && envTrue(getenv("REDIS_TLS")) {
		set("REDIS_TLS", "sentinel_tls", "true")
	}
	if auth := getenv("REDIS_SENTINEL_AUTH"); auth != "" {
		if !sentinel {
			errs = append(errs, errors.New("REDIS_SENTINEL_AUTH is set but REDIS_TYPE is not sentinel (nor REDIS_URL ?master_set=)"))
		} else if user, pass, ok := strings.Cut(auth, ":"); ok {
			set("REDIS_SENTINEL_AUTH", "sentinel_user", user)
			set("REDIS_SENTINEL_AUTH", redisopt.ParamSentinelPassword, pass)
		} else {
			set("REDIS_SENTINEL_AUTH", redisopt.ParamSentinelPassword, auth)
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
