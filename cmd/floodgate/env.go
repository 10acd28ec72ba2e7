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
	// envoyproxy/ratelimit's Redis settings that floodgate cannot honour:
	// refused, so that no deployment switches and silently loses one.
	for _, u := range []struct{ name, why string }{
		{"REDIS_TLS_CLIENT_CERT", "Redis TLS uses the system's roots, without a client certificate"},
		{"REDIS_TLS_CLIENT_KEY", "Redis TLS uses the system's roots, without a client certificate"},
		{"REDIS_TLS_CACERT", "Redis TLS uses the system's roots"},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "Redis TLS always verifies the host name"},
		{"REDIS_SENTINEL_AUTH", "Sentinel is asked without a password"},
	} {
		v := getenv(u.name)
		if v == "" {
			continue
		}
		if b, err := strconv.ParseBool(v); err == nil && !b {
			continue // false: what floodgate does
		}
		if u.name == "REDIS_SENTINEL_AUTH" {
			v = "xxxxx" // a password
		}
		bad(u.name, "%q is not supported: %s", v, u.why)
	}
	return e, errs
}

// redisURL reads REDIS_URL in redisstore's forms, or in
// envoyproxy/ratelimit's: HOST:PORT without a scheme (several, comma
// separated, for REDIS_TYPE cluster; the master's name first for
// sentinel), optionally after USER:PASSWORD@ or PASSWORD@ (taken as
// written, unescaped), or a socket's path (REDIS_SOCKET_TYPE unix), with
// REDIS_AUTH (PASSWORD or USER:PASSWORD) as the password and REDIS_TLS.
// Beside a URL, those variables must agree with it or be unset: none is
// dropped unseen. Its errors quote no password.
func redisURL(getenv func(string) string) (string, error) {
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
