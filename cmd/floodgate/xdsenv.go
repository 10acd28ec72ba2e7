package main

import (
	"cmp"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/xds"
)

// xdsSettings is the configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW),
// read from envoyproxy/ratelimit's variables.
type xdsSettings struct {
	Server       string            // CONFIG_GRPC_XDS_SERVER_URL: default localhost:18000, as upstream
	NodeID       string            // CONFIG_GRPC_XDS_NODE_ID: default "default"
	NodeMetadata map[string]string // CONFIG_GRPC_XDS_NODE_METADATA: k=v,k=v
	Headers      map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: k:v,k:v
	retryNote    string            // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL as set: logged at start, without effect
	TLS          *xdsTLS           // CONFIG_GRPC_XDS_SERVER_USE_TLS and the rest; nil means plaintext
	Backoff      xds.Backoff       // XDS_CLIENT_BACKOFF_*
	MaxMsgSize   int               // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: 0 means gRPC's 4 MiB
	ForceStart   bool              // FORCE_START_WITHOUT_INITIAL_CONFIG: serve before the first configuration
	// RuntimeIgnored is set when RUNTIME_ROOT is, which xDS ignores as
	// upstream does: logged at start.
	RuntimeIgnored bool
}

// parseSources reads what the service takes beside files: configuration
// over xDS and TLS on the gRPC listener, each as envoyproxy/ratelimit
// reads it. boolean reads one of upstream's booleans; bad lists a
// problem.
func parseSources(c *serveConfig, getenv func(string) string, boolean func(string) bool, bad func(name, format string, a ...any)) {
	switch v := getenv("CONFIG_TYPE"); strings.ToUpper(v) {
	case "", "FILE":
	case "GRPC_XDS_SOTW":
		c.XDS = parseXDS(getenv, boolean, bad)
		if v := c.XDS.retryNote; v != "" {
			notes := append(deref(c.notes), settingNote{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", v,
				"every connection attempt follows XDS_CLIENT_BACKOFF_*'s pauses"})
			c.notes = &notes
		}
	default:
		bad("CONFIG_TYPE", "%q is not FILE or GRPC_XDS_SOTW", v)
	}
	c.HealthyWithConfig = boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	if boolean("USE_PROMETHEUS") {
		// Upstream serves Prometheus on a listener of its own; floodgate's
		// debug listener serves /metrics, so it takes PROMETHEUS_ADDR (the
		// port Envoy Gateway's pods are scraped on).
		addr := cmp.Or(getenv("PROMETHEUS_ADDR"), ":9090")
		switch {
		case cmp.Or(getenv("PROMETHEUS_PATH"), "/metrics") != "/metrics":
			bad("PROMETHEUS_PATH", "%q is not supported: the metrics are on /metrics", getenv("PROMETHEUS_PATH"))
		case c.DebugAddr != "" && c.DebugAddr != addr:
			bad("PROMETHEUS_ADDR", "%s differs from DEBUG_ADDR %s: floodgate serves /metrics on its debug listener; set one", addr, c.DebugAddr)
		case addr == c.HTTPAddr || addr == c.GRPCAddr:
			bad("PROMETHEUS_ADDR", "%s is also HTTP_ADDR or GRPC_ADDR", addr)
		default:
			c.DebugAddr = addr
		}
	}

	if boolean("GRPC_SERVER_USE_TLS") {
		t := &grpcTLS{Cert: getenv("GRPC_SERVER_TLS_CERT"), Key: getenv("GRPC_SERVER_TLS_KEY"), ClientCA: getenv("GRPC_CLIENT_TLS_CACERT"), ClientSAN: getenv("GRPC_CLIENT_TLS_SAN")}
		// Envoy Gateway names the client CA GRPC_SERVER_TLS_CA_CERT, a
		// name upstream does not read; floodgate reads both.
		if ca := getenv("GRPC_SERVER_TLS_CA_CERT"); ca != "" {
			if t.ClientCA != "" && t.ClientCA != ca {
				bad("GRPC_SERVER_TLS_CA_CERT", "%q differs from GRPC_CLIENT_TLS_CACERT %q; set one", ca, t.ClientCA)
			}
			t.ClientCA = ca
		}
		if t.Cert == "" || t.Key == "" {
			bad("GRPC_SERVER_USE_TLS", "is true: set GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		if t.ClientSAN != "" && t.ClientCA == "" {
			bad("GRPC_CLIENT_TLS_SAN", "needs GRPC_CLIENT_TLS_CACERT: client certificates are verified only with it")
		}
		c.GRPCTLS = t
	} else {
		for _, name := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_SAN"} {
			if getenv(name) != "" {
				bad(name, "is set but GRPC_SERVER_USE_TLS is not true: the gRPC listener would be plain")
			}
		}
	}
}

func parseXDS(getenv func(string) string, boolean func(string) bool, bad func(name, format string, a ...any)) *xdsSettings {
	x := &xdsSettings{Server: "localhost:18000", NodeID: "default", ForceStart: boolean("FORCE_START_WITHOUT_INITIAL_CONFIG")}
	if v := getenv("CONFIG_GRPC_XDS_SERVER_URL"); v != "" {
		x.Server = v
	}
	if v := getenv("CONFIG_GRPC_XDS_NODE_ID"); v != "" {
		x.NodeID = v
	}
	x.RuntimeIgnored = getenv("RUNTIME_ROOT") != ""
	x.NodeMetadata = pairs("CONFIG_GRPC_XDS_NODE_METADATA", getenv("CONFIG_GRPC_XDS_NODE_METADATA"), "=", bad)
	x.Headers = pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"), ":", bad)

	tlsVars := []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}
	if boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		x.TLS = &xdsTLS{Cert: getenv(tlsVars[0]), Key: getenv(tlsVars[1]), CA: getenv(tlsVars[2]), SAN: getenv(tlsVars[3])}
		if (x.TLS.Cert == "") != (x.TLS.Key == "") {
			bad("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: set both or neither")
		}
	} else {
		for _, name := range tlsVars {
			if getenv(name) != "" {
				bad(name, "is set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true: the connection to the xDS server would be plain")
			}
		}
	}

	duration := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				bad(name, "%q is not a positive duration such as 10s", v)
			}
			*dst = d
		}
	}
	duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", &x.Backoff.Initial)
	duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", &x.Backoff.Max)
	if x.Backoff.Max > 0 && x.Backoff.Max < x.Backoff.Initial {
		bad("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "%v is below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL %v", x.Backoff.Max, x.Backoff.Initial)
	}
	if v := getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f < 1) {
			bad("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "%q is not a number from 0 to below 1", v)
		}
		x.Backoff.RandomFactor = f
		x.Backoff.NoJitter = x.Backoff.NoJitter || f == 0 // Backoff reads 0 as its default
	}
	if v := getenv("XDS_CLIENT_BACKOFF_JITTER"); v != "" {
		x.Backoff.NoJitter = !boolean("XDS_CLIENT_BACKOFF_JITTER")
	}
	if v := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			bad("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "%q is not a positive whole number", v)
		}
		x.MaxMsgSize = n
	}
	if v := getenv("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"); v != "" {
		// Upstream's pause between dial attempts; here every attempt
		// follows XDS_CLIENT_BACKOFF_*. Checked, and logged at start.
		var d time.Duration
		duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", &d)
		x.retryNote = v
	}
	return x
}

// pairs reads "k<sep>v,k<sep>v", listing each malformed entry.
func pairs(name, v, sep string, bad func(name, format string, a ...any)) map[string]string {
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		k, val, ok := strings.Cut(e, sep)
		if !ok || k == "" {
			bad(name, "%q is not key%svalue", e, sep)
			continue
		}
		m[k] = val
	}
	return m
}
