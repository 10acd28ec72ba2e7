package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestServeConfiguration: every problem of the environment is listed at
// once, with exit status 2.
func TestServeConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"no configuration directory", map[string]string{}, nil, []string{"CONFIG_DIR: is required"}},
		{"everything wrong", map[string]string{
			"CONFIG_DIR":              "x",
			"GRPC_ADDR":               "nowhere",
			"HTTP_ADDR":               ":99999",
			"DECISION_TIMEOUT":        "fast",
			"SHUTDOWN_TIMEOUT":        "-1s",
			"LOG_LEVEL":               "loud",
			"LOG_FORMAT":              "xml",
			"REDIS_URL":               "http://example",
			"MERGE_DOMAIN_CONFIG":     "perhaps",
			"CACHE_KEY_PREFIX":        "{x}",
			"DENIAL_CACHE_SIZE":       "-3",
			"GRPC_MAX_CONNECTION_AGE": "0s", "GRPC_MAX_CONNECTION_AGE_GRACE": "soon", "NEAR_LIMIT_RATIO": "1.2",
		}, nil, []string{
			`NEAR_LIMIT_RATIO: "1.2" is not a number above 0 and at most 1`,
			`GRPC_MAX_CONNECTION_AGE: "0s" is not a positive duration`, `GRPC_MAX_CONNECTION_AGE_GRACE: "soon" is not a positive duration`,
			`DENIAL_CACHE_SIZE: "-3" is not a whole number`,
			`CACHE_KEY_PREFIX: redisstore: invalid options: prefix "{x}" has a brace`,
			`GRPC_ADDR: "nowhere" is not HOST:PORT`, `HTTP_ADDR: ":99999" is not HOST:PORT`,
			`DECISION_TIMEOUT: "fast"`, `SHUTDOWN_TIMEOUT: "-1s"`, `LOG_LEVEL: "loud"`, `LOG_FORMAT: "xml"`,
			"REDIS_URL: redisstore: invalid options", `MERGE_DOMAIN_CONFIG: "perhaps"`,
		}},
		{"same addresses", map[string]string{"CONFIG_DIR": "x", "HTTP_ADDR": ":9000", "DEBUG_ADDR": ":9000", "GRPC_ADDR": ":9000"}, nil,
			[]string{"DEBUG_ADDR: is HTTP_ADDR", "GRPC_ADDR: :9000 is also an HTTP address"}},
		{"JSON_ADDR", map[string]string{"CONFIG_DIR": "x", "HTTP_ADDR": ":9000", "JSON_ADDR": ":9000"}, nil,
			[]string{"JSON_ADDR: :9000 is also HTTP_ADDR"}},
		{"JSON_ADDR the debug listener's", map[string]string{"CONFIG_DIR": "x", "JSON_ADDR": ":9001", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9001"}, nil,
			[]string{"JSON_ADDR: :9001 is also the debug listener's"}},
		{"JSON_ADDR not an address", map[string]string{"CONFIG_DIR": "x", "JSON_ADDR": "on"}, nil, []string{`JSON_ADDR: "on" is not HOST:PORT`}},
		{"a bad flag", map[string]string{}, []string{"-config", "x"}, []string{"flags: flag provided but not defined: -config", "CONFIG_DIR: is required"}},
		{"a stray argument", map[string]string{}, []string{"serve", "-config-dir", "x", "extra"}, []string{`unexpected arguments ["extra"]`}},
		{"envoyproxy/ratelimit's REDIS_TYPE", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "a:1", "REDIS_TYPE": "ring"}, nil, []string{`REDIS_TYPE "ring"`}},
		{"REDIS_TYPE beside a URL", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "redis://a:1", "REDIS_TYPE": "ring"}, nil, []string{`REDIS_TYPE "ring"`}},
		{"REDIS_TLS not a boolean", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "a:1", "REDIS_TLS": "yes"}, nil, []string{`REDIS_TLS "yes" is not true or false`}},
		{"REDIS_TLS beside a plain URL", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "redis://a:1", "REDIS_TLS": "true"}, nil, []string{"REDIS_TLS is true but REDIS_URL is not a rediss:// URL"}},
		{"REDIS_AUTH beside a URL", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "redis://a:1", "REDIS_AUTH": "pw"}, nil, []string{"REDIS_AUTH is set beside a REDIS_URL URL"}},
		{"sentinel beside a URL without its master", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "redis://a:1", "REDIS_TYPE": "sentinel"}, nil, []string{"REDIS_URL has no ?master_set="}},
		{"REDIS_SOCKET_TYPE", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "udp"}, nil, []string{`REDIS_SOCKET_TYPE "udp" is not tcp or unix`}},
		{"TLS over a unix socket", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "/r.sock", "REDIS_TLS": "1"}, nil, []string{"REDIS_TLS is true for a unix socket"}},
		{"envoyproxy/ratelimit's features that floodgate lacks", map[string]string{
			"CONFIG_DIR": "x", "QUOTA_MODE": "often",
			"RESPONSE_DYNAMIC_METADATA": "yes", "BACKEND_TYPE": "memcache", "CONFIG_TYPE": "GRPC_XDS_DELTA", "SHADOW_MODE": "sometimes",
			"MEMCACHE_HOST_PORT": "mc:11211", "MEMCACHE_MAX_IDLE_CONNS": "4", "MEMCACHE_SRV": "_mc._tcp", "MEMCACHE_SRV_REFRESH": "5s",
			"MEMCACHE_TLS": "true", "MEMCACHE_TLS_CLIENT_CERT": "/m.pem", "MEMCACHE_TLS_CLIENT_KEY": "/mk.pem", "MEMCACHE_TLS_CACERT": "/mca.pem",
			"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "1",
		}, nil, []string{
			`QUOTA_MODE: "often" is not true or false`,
			`RESPONSE_DYNAMIC_METADATA: "yes" is not true or false`, `BACKEND_TYPE: "memcache" is not supported`,
			`MEMCACHE_HOST_PORT: "mc:11211" is not supported: memcache`, `MEMCACHE_MAX_IDLE_CONNS: "4" is not supported`,
			`MEMCACHE_SRV: "_mc._tcp" is not supported`, `MEMCACHE_SRV_REFRESH: "5s" is not supported`, `MEMCACHE_TLS: "true" is not supported`,
			`MEMCACHE_TLS_CLIENT_CERT: "/m.pem" is not supported`, `MEMCACHE_TLS_CLIENT_KEY: "/mk.pem" is not supported`,
			`MEMCACHE_TLS_CACERT: "/mca.pem" is not supported`, `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION: "1" is not supported`,
			`CONFIG_TYPE: "GRPC_XDS_DELTA" is not FILE or GRPC_XDS_SOTW`, `SHADOW_MODE: "sometimes" is not true or false`,
		}},
		{"TLS files without TLS", map[string]string{
			"CONFIG_DIR": "x", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_CLIENT_TLS_SAN": "envoy", "GRPC_SERVER_TLS_CA_CERT": "/ca.pem",
		}, nil, []string{
			"GRPC_SERVER_TLS_CERT: is set but GRPC_SERVER_USE_TLS is not true", "GRPC_CLIENT_TLS_SAN: is set but GRPC_SERVER_USE_TLS is not true",
			"GRPC_SERVER_TLS_CA_CERT: is set but GRPC_SERVER_USE_TLS is not true",
		}},
		{"TLS without its files", map[string]string{
			"CONFIG_DIR": "x", "GRPC_SERVER_USE_TLS": "true", "GRPC_CLIENT_TLS_SAN": "envoy",
			"GRPC_CLIENT_TLS_CACERT": "/a.pem", "GRPC_SERVER_TLS_CA_CERT": "/b.pem",
		}, nil, []string{
			"GRPC_SERVER_USE_TLS: is true: set GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
			`GRPC_SERVER_TLS_CA_CERT: "/b.pem" differs from GRPC_CLIENT_TLS_CACERT "/a.pem"`,
		}},
		{"TLS files that cannot be read", map[string]string{
			"CONFIG_DIR": "../../examples/rls/config", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/nonexistent/c.pem", "GRPC_SERVER_TLS_KEY": "/nonexistent/k.pem",
		}, nil, []string{"GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: open /nonexistent/c.pem"}},
		{"xDS done wrong", map[string]string{
			"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_DIR": "x",
			"CONFIG_GRPC_XDS_NODE_METADATA":             "zone=a,broken",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1,x-b",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":           "/c.pem",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":       "10s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1s",
			"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2", "XDS_CLIENT_BACKOFF_JITTER": "maybe",
			"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "-1", "FORCE_START_WITHOUT_INITIAL_CONFIG": "yes please",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "often",
		}, nil, []string{
			"CONFIG_DIR: is set beside CONFIG_TYPE=GRPC_XDS_SOTW",
			`CONFIG_GRPC_XDS_NODE_METADATA: "broken" is not key=value`,
			`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "x-b" is not key:value`,
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT: is set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true",
			"XDS_CLIENT_BACKOFF_MAX_INTERVAL: 1s is below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL 10s",
			`XDS_CLIENT_BACKOFF_RANDOM_FACTOR: "2" is not a number from 0 to below 1`,
			`XDS_CLIENT_BACKOFF_JITTER: "maybe" is not true or false`,
			`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: "-1" is not a positive whole number`,
			`FORCE_START_WITHOUT_INITIAL_CONFIG: "yes please" is not true or false`,
			`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: "often" is not a positive duration`,
		}},
		{"statistics done wrong", map[string]string{
			"CONFIG_DIR": "x", "USE_STATSD": "maybe", "STATSD_PORT": "statsd", "STATSD_PROTOCOL": "quic", "STATS_FLUSH_INTERVAL": "-1s",
			"EXTRA_TAGS": "env=prod", "GOSTATS_FLUSH_INTERVAL_SECONDS": "5s", "USE_DOG_STATSD": "yes", "DISABLE_STATS": "no",
			"USE_DOG_STATSD_MOGRIFIERS": "A,B,C", "DOG_STATSD_MOGRIFIER_A_PATTERN": "(", "DOG_STATSD_MOGRIFIER_B_PATTERN": "x",
			"DOG_STATSD_MOGRIFIER_C_PATTERN": "x", "DOG_STATSD_MOGRIFIER_C_NAME": "y", "DOG_STATSD_MOGRIFIER_C_TAGS": "k",
			"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "/nonexistent/mapping.yaml",
		}, nil, []string{
			`USE_STATSD: "maybe" is not true or false`, `USE_DOG_STATSD: "yes" is not true or false`, `DISABLE_STATS: "no" is not true or false`,
			`STATSD_PORT: "statsd" is not a port`, `STATSD_PROTOCOL: "quic" is not tcp or udp`,
			`GOSTATS_FLUSH_INTERVAL_SECONDS: "5s" is not a whole number`, `STATS_FLUSH_INTERVAL: "-1s" is not a positive duration`,
			`EXTRA_TAGS: "env=prod" is not KEY:VALUE,KEY:VALUE`,
			"USE_DOG_STATSD_MOGRIFIERS: DOG_STATSD_MOGRIFIER_A_PATTERN: error parsing regexp",
			"USE_DOG_STATSD_MOGRIFIERS: no DOG_STATSD_MOGRIFIER_B_NAME for mogrifier B",
			`USE_DOG_STATSD_MOGRIFIERS: DOG_STATSD_MOGRIFIER_C_TAGS "k" is not KEY:VALUE,KEY:VALUE`,
			"PROMETHEUS_MAPPER_YAML: open /nonexistent/mapping.yaml: no such file or directory",
		}},
		{"a mapping that does not parse", map[string]string{"CONFIG_DIR": "x", "USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "testdata/bad-mapping.yaml"},
			nil, []string{"PROMETHEUS_MAPPER_YAML: testdata/bad-mapping.yaml: "}},
		{"Prometheus elsewhere", map[string]string{"CONFIG_DIR": "x", "USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "/m", "DEBUG_ADDR": ":7"},
			nil, []string{`PROMETHEUS_PATH: "/m" is not supported`}},
		{"Prometheus beside a debug address", map[string]string{"CONFIG_DIR": "x", "USE_PROMETHEUS": "true", "DEBUG_PORT": "7"},
			nil, []string{"PROMETHEUS_ADDR: :9090 differs from DEBUG_ADDR :7"}},
		{"Redis TLS files without Redis TLS", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_TLS_CLIENT_CERT": "/rc.pem", "REDIS_TLS_CACERT": "/rca.pem",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "1", "REDIS_SENTINEL_AUTH": "pw",
		}, nil, []string{
			"REDIS_TLS_CLIENT_CERT is set but REDIS_TLS is not true", "REDIS_TLS_CACERT is set but REDIS_TLS is not true",
			"REDIS_TLS_CLIENT_CERT: and REDIS_TLS_CLIENT_KEY go together",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION is set but REDIS_TLS is not true",
			"REDIS_SENTINEL_AUTH is set but REDIS_TYPE is not sentinel",
		}},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION not a boolean", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/nonexistent/rc.pem",
			"REDIS_TLS_CLIENT_KEY": "/nonexistent/rk.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "sometimes",
		}, nil, []string{
			`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: "sometimes" is not true or false`,
		}},
		{"a Redis CA file that cannot be read", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "rediss://r:6379?tls_ca=/a.pem", "REDIS_TLS_CACERT": "/nonexistent/rca.pem",
		}, nil, []string{"REDIS_TLS_CACERT is set beside ?tls_ca= in REDIS_URL"}},
		{"a Redis client certificate that cannot be read", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/nonexistent/rc.pem",
			"REDIS_TLS_CLIENT_KEY": "/nonexistent/rk.pem", "REDIS_TLS_CACERT": "serve_test.go",
		}, nil, []string{"REDIS_URL: redisstore: invalid options: URL: tls_cert, tls_key: open /nonexistent/rc.pem: no such file or directory"}},
		{"a Redis CA file without a certificate", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "serve_test.go",
		}, nil, []string{"REDIS_URL: redisstore: invalid options: URL: tls_ca: serve_test.go holds no PEM certificate"}},
		{"per-second Redis settings without REDIS_PERSECOND", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND_URL": "r2:6379", "REDIS_PERSECOND_POOL_SIZE": "5", "REDIS_PERSECOND_TLS": "false",
		}, nil, []string{
			"REDIS_PERSECOND_URL: is set but REDIS_PERSECOND is not true", "REDIS_PERSECOND_POOL_SIZE: is set but REDIS_PERSECOND is not true",
		}},
		{"REDIS_PERSECOND without its Redis", map[string]string{"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND": "true"}, nil,
			[]string{"REDIS_PERSECOND: is true: set REDIS_PERSECOND_URL"}},
		{"REDIS_PERSECOND with the other limits in memory", map[string]string{"CONFIG_DIR": "x", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "r:6379"}, nil,
			[]string{"REDIS_PERSECOND: is true but REDIS_URL is empty"}},
		{"the per-second Redis done wrong", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "r2:6379", "REDIS_PERSECOND_TYPE": "ring",
			"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "ERROR", "REDIS_PERSECOND_PIPELINE_WINDOW": "soon",
		}, nil, []string{
			`REDIS_PERSECOND_URL: REDIS_PERSECOND_TYPE "ring" is not single, sentinel or cluster`,
			`REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: "ERROR" is not supported`, `REDIS_PERSECOND_PIPELINE_WINDOW: "soon" is not a duration`,
		}},
		{"upstream's pool settings done wrong", map[string]string{
			"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_POOL_SIZE": "ten", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE", "REDIS_PIPELINE_LIMIT": "-1",
			"REDIS_TIMEOUT": "soon",
		}, nil, []string{
			`REDIS_POOL_SIZE: "ten" is not a whole number`, `REDIS_POOL_ON_EMPTY_BEHAVIOR: "CREATE" is not supported`,
			`REDIS_PIPELINE_LIMIT: "-1" is not a whole number`,
			`REDIS_URL: REDIS_TIMEOUT "soon" is not a positive duration`,
		}},
		{"other pool behaviours", map[string]string{"CONFIG_DIR": "x", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "block", "EXPIRATION_JITTER_MAX_SECONDS": "-1"}, nil,
			[]string{`REDIS_POOL_ON_EMPTY_BEHAVIOR: "block" is not WAIT`, `EXPIRATION_JITTER_MAX_SECONDS: "-1" is not a whole number`}},
		{"upstream's start-up wait and Redis health", map[string]string{"CONFIG_DIR": "x", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m",
			"REDIS_STARTUP_INITIAL_INTERVAL": "often", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, nil,
			[]string{`REDIS_STARTUP_MAX_ELAPSED_TIME: "1m" is not supported: the service does not wait for Redis at start`,
				`REDIS_STARTUP_INITIAL_INTERVAL: "often" is not a duration`, `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: is true but REDIS_URL is empty`}},
		{"xDS client certificate without its key", map[string]string{
			"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c.pem",
		}, nil, []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT: and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs bytes.Buffer
			args := tc.args
			if args == nil {
				args = []string{"serve"}
			}
			code := serve(context.Background(), args, env(tc.env), &errs, serveHooks{})
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs.String(), w) {
					t.Errorf("the errors do not say %q:\n%s", w, errs.String())
				}
			}
		})
	}
}

// TestRedisURLForms: envoyproxy/ratelimit's REDIS_URL (HOST:PORT, with
// REDIS_TYPE, REDIS_AUTH, REDIS_TLS) becomes a redisstore URL.
func TestRedisURLForms(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_URL": "redis://r:6379/0"}, "redis://r:6379/0"},
		{map[string]string{"REDIS_URL": "r:6379"}, "redis://r:6379"},
		{map[string]string{"REDIS_URL": "a:1,b:2,c:3", "REDIS_TYPE": "cluster"}, "redis://a:1?addr=b%3A2&addr=c%3A3"},
		{map[string]string{"REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_TYPE": "SENTINEL"}, "redis://s1:26379?addr=s2%3A26379&master_set=mymaster"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "secret", "REDIS_TLS": "true"}, "rediss://:secret@r:6379"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "user:secret"}, "redis://user:secret@r:6379"},
		{map[string]string{"REDIS_URL": "rediss://r:6379", "REDIS_TLS": "true", "REDIS_TYPE": "single"}, "rediss://r:6379"},
		{map[string]string{"REDIS_URL": "redis://s:26379?master_set=m", "REDIS_TYPE": "sentinel", "REDIS_TLS": "false"}, "redis://s:26379?master_set=m"},
		{map[string]string{"REDIS_URL": "/var/run/redis.sock", "REDIS_SOCKET_TYPE": "unix", "REDIS_AUTH": "secret"}, "unix://:secret@/var/run/redis.sock"},
		{map[string]string{"REDIS_URL": "/var/run/redis.sock"}, "unix:///var/run/redis.sock"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_SOCKET_TYPE": "TCP"}, "redis://r:6379"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem",
			"REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			"rediss://r:6379?tls_ca=%2Fca.pem&tls_cert=%2Fc.pem&tls_key=%2Fk.pem&tls_skip_hostname=true"},
		{map[string]string{"REDIS_URL": "rediss://r:6379/1", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "false"}, "rediss://r:6379/1"},
		{map[string]string{"REDIS_URL": "m,s1:26379", "REDIS_TYPE": "sentinel", "REDIS_SENTINEL_AUTH": "pw"}, "redis://s1:26379?master_set=m&sentinel_password=pw"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TIMEOUT": "5s"}, "redis://r:6379?dial_timeout=5s&write_timeout=5s"},
		{map[string]string{"REDIS_URL": "m,s1:26379", "REDIS_TYPE": "sentinel", "REDIS_SENTINEL_AUTH": "u:p@w", "REDIS_TLS": "true"},
			"rediss://s1:26379?master_set=m&sentinel_password=p%40w&sentinel_tls=true&sentinel_user=u"},
	} {
		got, err := redisURL(env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

// TestPerSecondRedisSettings: REDIS_PERSECOND_URL is read as REDIS_URL
// is, with its own companions, and the REDIS_TLS_* files serve the Redis
// that has TLS on: here the per-second one alone, so the other one does
// not refuse them. Accepted settings without effect are kept to be logged,
// EXPIRATION_JITTER_MAX_SECONDS=0 (what floodgate does) among none.
func TestPerSecondRedisSettings(t *testing.T) {
	c, err := parseServe(nil, env(map[string]string{
		"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "m,s1:26379,s2:26379",
		"REDIS_PERSECOND_TYPE": "sentinel", "REDIS_PERSECOND_AUTH": "pw", "REDIS_PERSECOND_SENTINEL_AUTH": "spw", "REDIS_PERSECOND_TLS": "true",
		"REDIS_TLS_CACERT": "../../deploy/Dockerfile", "REDIS_PERSECOND_TIMEOUT": "2s", "REDIS_POOL_SIZE": "10",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "wait", "EXPIRATION_JITTER_MAX_SECONDS": "300",
	}))
	if err == nil || !strings.Contains(err.Error(), "REDIS_PERSECOND_URL: redisstore: invalid options: URL: tls_ca: ../../deploy/Dockerfile holds no PEM certificate") ||
		strings.Contains(err.Error(), "REDIS_TLS_CACERT is set but REDIS_TLS is not true") {
		t.Fatalf("parseServe: %v; want the CA file read for the per-second Redis alone", err)
	}
	c, err = parseServe(nil, env(map[string]string{
		"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "m,s1:26379,s2:26379",
		"REDIS_PERSECOND_TYPE": "sentinel", "REDIS_PERSECOND_AUTH": "pw", "REDIS_PERSECOND_SENTINEL_AUTH": "spw", "REDIS_PERSECOND_TLS": "true",
		"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "REDIS_PERSECOND_TIMEOUT": "2s", "REDIS_POOL_SIZE": "10",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "wait", "EXPIRATION_JITTER_MAX_SECONDS": "300",
		"REDIS_STARTUP_MAX_INTERVAL": "30s", "REDIS_STARTUP_MAX_ELAPSED_TIME": "0", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "false",
	}))
	if err != nil {
		t.Fatal(err)
	}
	const want = "rediss://:pw@s1:26379?addr=s2%3A26379&dial_timeout=2s&master_set=m&sentinel_password=spw&sentinel_tls=true&tls_skip_hostname=true&write_timeout=2s"
	if c.RedisURL != "redis://r:6379" || c.PerSecondURL != want {
		t.Errorf("REDIS_URL %q, per second %q; want redis://r:6379 and %q", c.RedisURL, c.PerSecondURL, want)
	}
	notes := deref(c.notes)
	wantNotes := []settingNote{
		{"REDIS_POOL_SIZE", "10", "the store multiplexes one connection per Redis node: there is no pool to size"},
		{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "wait", "there is no pool to run empty; a decision waits at most DECISION_TIMEOUT"},
		{"REDIS_STARTUP_MAX_INTERVAL", "30s", "the service does not wait for Redis at start: it serves by the failure modes and redials every 500ms"},
		{"EXPIRATION_JITTER_MAX_SECONDS", "300", "each key expires when its state stops weighing, with no jitter: a jitter would only keep keys longer, and change no answer"},
	}
	if !slices.Equal(notes, wantNotes) {
		t.Errorf("notes %q, want %q", notes, wantNotes)
	}
}

// TestServeInvalidConfigDir: an invalid configuration at start exits 2,
// listing the problems of every file.
func TestServeInvalidConfigDir(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var errs bytes.Buffer
	code := serve(context.Background(), []string{"-config-dir", dir}, env(map[string]string{"GRPC_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0"}), &errs, serveHooks{})
	if code != 2 || !strings.Contains(errs.String(), `a.yaml: a.k: invalid rate limit unit "fortnight"`) || !strings.Contains(errs.String(), "b.yaml: b.k: requests_per_unit is missing") {
		t.Errorf("exit %d, errors:\n%s", code, errs.String())
	}
}

// running is a service started by serve in the background.
type running struct {
	grpc, http, debug string
	json              string // JSON_ADDR's listener, when there is one
	logs              *syncbuf.Buffer
	cancel            context.CancelFunc
	done              chan int
}

// startServe runs the service with the environment vars and args until
// the test ends: its listeners on free loopback ports, and a decision
// budget of 2s unless vars sets DECISION_TIMEOUT, as rls's tests have.
func startServe(t *testing.T, vars map[string]string, args ...string) *running {
	t.Helper()
	vars["HTTP_ADDR"] = "127.0.0.1:0"
	if vars["GRPC_UDS"] == "" {
		vars["GRPC_ADDR"] = "127.0.0.1:0"
	}
	if _, ok := vars["DECISION_TIMEOUT"]; !ok {
		// The service's 50ms default is missed on a loaded test machine
		// under the race detector (TestServeEnvoyGateway's cost flow got
		// Unavailable beside a busy core); a test of the budget sets its
		// own.
		vars["DECISION_TIMEOUT"] = "2s"
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{logs: &syncbuf.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		r.done <- serve(ctx, args, env(vars), r.logs, serveHooks{ready: func(g, h, d string) {
			r.grpc, r.http, r.debug = g, h, d
			once.Do(func() { close(ready) })
		}, json: func(a string) { r.json = a }})
	}()
	select {
	case <-ready:
	case code := <-r.done:
		t.Fatalf("serve exited %d before serving:\n%s", code, r.logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start within 10s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop within 15s")
		}
	})
	return r
}

func (r *running) client(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServeExamplesInMemory is `floodgate -config-dir examples/rls/config`
// with no Redis: it warns, and /json answers as documented.
func TestServeExamplesInMemory(t *testing.T) {
	r := startServe(t, map[string]string{}, "-config-dir", "../../examples/rls/config")
	if !strings.Contains(r.logs.String(), "REDIS_URL is empty") {
		t.Errorf("no warning about the memory store:\n%s", r.logs.String())
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"remote_address","value":"192.0.2.1"}]}]}`
	for i := range 5 {
		if code, out := postJSON(t, "http://"+r.http+"/json", body); code != 200 || !strings.Contains(out, `"OK"`) {
			t.Fatalf("login %d: %d %s", i+1, code, out)
		}
	}
	if code, out := postJSON(t, "http://"+r.http+"/json", body); code != 429 || !strings.Contains(out, `"OVER_LIMIT"`) || !strings.Contains(out, "login_per_address") {
		t.Fatalf("login 6: %d %s, want 429 OVER_LIMIT", code, out)
	}
	res, err := http.Get("http://" + r.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `floodgate_rls_over_limit_total{descriptor="",domain="edge",limit="login_per_address"} 1`) ||
		!strings.Contains(string(b), `floodgate_decisions_total{gate="edge"`) || !strings.Contains(string(b), "go_goroutines") {
		t.Errorf("/metrics lacks the service's, the Enforcer's or the runtime's series")
	}
}

// TestServeRedisAndGracefulShutdown serves on Redis with a debug
// listener, then shuts down while a call waits on a frozen Redis: the
// call finishes with its answer (the failure mode's), and serve exits 0.
func TestServeRedisAndGracefulShutdown(t *testing.T) {
	redis := redistest.Start(t)
	dir := t.TempDir()
	conf := "domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, map[string]string{
		"REDIS_URL":  redis.Addr(), // envoyproxy/ratelimit's form: HOST:PORT
		"CONFIG_DIR": dir, "DEBUG_ADDR": "127.0.0.1:0", "DECISION_TIMEOUT": "1s", "LOG_FORMAT": "json",
		"LOCAL_CACHE_SIZE_IN_BYTES": "30000", // envoyproxy/ratelimit's name: 100 denials
	})
	c := r.client(t)
	call := func() (*rlsv3.RateLimitResponse, error) {
		return c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
		}}})
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := call()
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("call %d: %v, %v; want %v", i+1, resp, err, want)
		}
	}
	// The metrics and configuration are on DEBUG_ADDR only.
	for addr, want := range map[string]int{r.debug: 200, r.http: 404} {
		res, err := http.Get("http://" + addr + "/rlconfig")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("/rlconfig on %s: %d, want %d", addr, res.StatusCode, want)
		}
	}

	if err := redis.Stop(); err != nil {
		t.Fatal(err)
	}
	defer redis.Cont()
	// The denial cache answers user=u's denial again without Redis.
	if resp, err := call(); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a cached denial with Redis frozen: %v, %v; want OVER_LIMIT", resp, err)
	}
	type answer struct {
		err  error
		took time.Duration
	}
	inflight := make(chan answer, 1)
	go func() {
		began := time.Now()
		_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "v"}},
		}}})
		inflight <- answer{err, time.Since(began)}
	}()
	time.Sleep(200 * time.Millisecond) // the call waits on the frozen Redis
	r.cancel()
	a := <-inflight
	if status.Code(a.err) != codes.Unavailable || a.took < 900*time.Millisecond {
		t.Errorf("the call in flight: %v after %v; want the failure mode's Unavailable after the 1s budget", a.err, a.took)
	}
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, r.logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(r.logs.String(), `"msg":"shutting down: in-flight calls finish"`) {
		t.Errorf("no JSON shutdown log:\n%s", r.logs.String())
	}
}

// TestUpstreamEnvironment: envoyproxy/ratelimit's variables configure the
// service where floodgate's own are unset.
func TestUpstreamEnvironment(t *testing.T) {
	c, err := parseServe(nil, env(map[string]string{
		"RUNTIME_ROOT": "/data/", "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_PORT": "9081", "PORT": "9080", "DEBUG_PORT": "6070",
		"LOG_LEVEL": "WARN", "MERGE_DOMAIN_CONFIG": "true", "REDIS_URL": "redis:6379", "CACHE_KEY_PREFIX": "rl_",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := serveConfig{
		RedisURL: "redis://redis:6379", RedisPrefix: "rl_", GRPCAddr: ":9081", HTTPAddr: ":9080", DebugAddr: ":6070",
		ConfigDir: "/data/ratelimit/config", MergeDomains: true, DecisionTimeout: 50 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second, LogLevel: slog.LevelWarn, LogFormat: "text",
		MaxConnAge: 24 * time.Hour, MaxConnAgeGrace: time.Hour,
		httpReadTimeout: 30 * time.Second, idleTimeout: 2 * time.Minute, statsdUnset: true,
	}
	if c != want {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	// envoyproxy/ratelimit's hosts: a host alone takes upstream's port,
	// and RUNTIME_APPDIRECTORY names the last directory.
	c, err = parseServe(nil, env(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "limits", "HOST": "127.0.0.1", "PORT": "9080",
		"GRPC_HOST": "10.0.0.1", "DEBUG_HOST": "::1", "SHADOW_MODE": "true", "NEAR_LIMIT_RATIO": "0.9", "QUOTA_MODE": "false", "BACKEND_TYPE": "redis", "CONFIG_TYPE": "FILE",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:9080" || c.GRPCAddr != "10.0.0.1:8081" || c.DebugAddr != "[::1]:6070" || c.ConfigDir != "/data/limits" || !c.ShadowMode || c.NearLimitRatio != 0.9 {
		t.Errorf("hosts, application directory and shadow mode: %+v", c)
	}
	// floodgate's own names win.
	c, err = parseServe([]string{"-config-dir", "/etc/fg"}, env(map[string]string{"RUNTIME_ROOT": "/data", "CONFIG_DIR": "/x", "GRPC_ADDR": "127.0.0.1:1", "GRPC_PORT": "2"}))
	if err != nil || c.ConfigDir != "/etc/fg" || c.GRPCAddr != "127.0.0.1:1" {
		t.Errorf("%+v, %v", c, err)
	}
}

// TestServeShutdownWithHealthWatch: a client watching the gRPC health
// service does not hold the exit for SHUTDOWN_TIMEOUT; it sees
// NOT_SERVING and its stream ends.
func TestServeShutdownWithHealthWatch(t *testing.T) {
	r := startServe(t, map[string]string{"SHUTDOWN_TIMEOUT": "10s"}, "-config-dir", "../../examples/rls/config")
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", m, err)
	}
	began := time.Now()
	r.cancel()
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("watch at shutdown: %v, %v; want NOT_SERVING", m, err)
	}
	code := <-r.done
	r.done <- code // for the cleanup
	if took := time.Since(began); code != 0 || took > 3*time.Second {
		t.Errorf("exit %d after %v; want 0 at once, not after SHUTDOWN_TIMEOUT", code, took)
	}
}

// TestServeMaxConnectionAge: GRPC_MAX_CONNECTION_AGE, as upstream, sends
// a gRPC connection GOAWAY once it is that old, so clients spread over
// instances added since; the client reconnects and its calls go on.
func TestServeMaxConnectionAge(t *testing.T) {
	r := startServe(t, map[string]string{"GRPC_MAX_CONNECTION_AGE": "200ms", "GRPC_MAX_CONNECTION_AGE_GRACE": "100ms"}, "-config-dir", "../../examples/rls/config")
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	var before, after peer.Peer
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Peer(&before)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Peer(&after)); err != nil {
		t.Fatalf("after the connection's age: %v", err)
	}
	if after.LocalAddr.String() == before.LocalAddr.String() {
		t.Errorf("one connection (from %s) after 1s; want a new one after 200ms", before.LocalAddr)
	}
}

// TestServeHelp: -h prints the service's usage, exit 0, rather than
// refusing to start.
func TestServeHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-help"}} {
		var errs bytes.Buffer
		if code := serve(context.Background(), args, env(map[string]string{}), &errs, serveHooks{}); code != 0 ||
			!strings.HasPrefix(errs.String(), "usage: floodgate [serve] [-config-dir DIR]") || strings.Contains(errs.String(), "is required") {
			t.Errorf("%v: exit %d:\n%s", args, code, errs.String())
		}
	}
}

// TestServeHTTPBounds: a client trickling a /json body, or keeping an
// idle connection, loses its connection after the HTTP listener's bounds
// (shortened here) instead of holding it for ever.
func TestServeHTTPBounds(t *testing.T) {
	cfg, err := parseServe([]string{"-config-dir", "../../examples/rls/config"}, env(map[string]string{"GRPC_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.httpReadTimeout, cfg.idleTimeout = 300*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runService(ctx, cfg, slog.New(slog.DiscardHandler), serveHooks{ready: func(g, h, _ string) { addr <- g; addr <- h }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runService: %v", err)
		}
	}()
	rpc, web := <-addr, <-addr
	// closedWithin reads conn until the server closes it, failing after d.
	closedWithin := func(what string, conn net.Conn, d time.Duration) {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(d))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("%s: the connection is still open after %v: %v", what, d, err)
		}
	}
	slow, err := net.Dial("tcp", web)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "POST /json HTTP/1.1\r\nHost: fg\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	closedWithin("a body trickled", slow, 3*time.Second)

	idle, err := net.Dial("tcp", web)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /healthcheck HTTP/1.1\r\nHost: fg\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("healthcheck: %v, %v", res, err)
	}
	res.Body.Close()
	closedWithin("an idle connection", idle, 3*time.Second)

	// A gRPC connection that opens HTTP/2 and then calls nothing is sent
	// GOAWAY and closed (it was held for good: a client holding 20,000 of
	// them took every file descriptor). grpc-go closes it 5s after the
	// first GOAWAY when the client does not answer its ping, as this one
	// does not.
	h2, err := net.Dial("tcp", rpc)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	io.WriteString(h2, http2.ClientPreface)
	if err := http2.NewFramer(h2, nil).WriteSettings(); err != nil {
		t.Fatal(err)
	}
	closedWithin("an idle gRPC connection", h2, 15*time.Second)
}

// TestServeLogLevels: every LOG_LEVEL envoyproxy/ratelimit takes (its
// logger's levels) starts the service, at the nearest slog level.
func TestServeLogLevels(t *testing.T) {
	for v, want := range map[string]slog.Level{"TRACE": slog.LevelDebug, "debug": slog.LevelDebug, "": slog.LevelInfo, "Info": slog.LevelInfo,
		"warning": slog.LevelWarn, "WARN": slog.LevelWarn, "error": slog.LevelError, "fatal": slog.LevelError, "PANIC": slog.LevelError} {
		c, err := parseServe(nil, env(map[string]string{"CONFIG_DIR": "x", "LOG_LEVEL": v}))
		if err != nil || c.LogLevel != want {
			t.Errorf("LOG_LEVEL %q: %v, %v; want %v", v, c.LogLevel, err, want)
		}
	}
}

// TestServeRedactsRedisPasswords: a REDIS_URL that does not parse is
// quoted by the error, and its password (or REDIS_AUTH's, in the URL
// built from it) must not reach the logs.
func TestServeRedactsRedisPasswords(t *testing.T) {
	for _, vars := range []map[string]string{
		{"REDIS_URL": "redis://:hunter2@host:99x"},
		{"REDIS_URL": "rediss://user:hun%2Fter2@[::1"},
		{"REDIS_URL": "host:99x", "REDIS_AUTH": "hunter2"},
		{"REDIS_URL": "host:99x", "REDIS_AUTH": "user:hun/ter2"},
	} {
		vars["CONFIG_DIR"] = "x"
		var errs bytes.Buffer
		code := serve(context.Background(), nil, env(vars), &errs, serveHooks{})
		if code != 2 || !strings.Contains(errs.String(), "REDIS_URL: ") || !strings.Contains(errs.String(), "xxxxx") ||
			strings.Contains(errs.String(), "hunter2") || strings.Contains(errs.String(), "ter2") {
			t.Errorf("%v: exit %d:\n%s", vars, code, errs.String())
		}
	}
}

// TestRedisOptionErrorsHidePasswords: the options of every package that
// dials Redis from a URL do not quote its password in their errors
// (internal/redisopt redacts them), so the subcommands (peek, reset,
// blocked, override) print none either.
func TestRedisOptionErrorsHidePasswords(t *testing.T) {
	const u = "redis://:hunter2@host:99x"
	hidden := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "xxxxx") && !strings.Contains(err.Error(), "hunter2")
	}
	if err := (redisstore.Options{URL: u}).Validate(); !hidden(err) {
		t.Errorf("redisstore.Options.Validate: %v", err)
	}
	if _, err := redisstore.New(context.Background(), redisstore.Options{URL: u}); !hidden(err) {
		t.Errorf("redisstore.New: %v", err)
	}
	if _, err := overrides.New(context.Background(), overrides.Options{URL: u}); !hidden(err) {
		t.Errorf("overrides.New: %v", err)
	}
	var out, errs bytes.Buffer
	run(context.Background(), []string{"peek", "-rule", "name=login,limit=5/10m", "alice"}, env(map[string]string{"REDIS_URL": u}), &out, &errs)
	if !hidden(errors.New(errs.String())) {
		t.Errorf("floodgate peek, a URL with a password that does not parse:\n%s", errs.String())
	}
}

// TestDeployConfig: the configuration deploy/compose.yaml mounts loads,
// with nothing of its directory left unread, and limits as its comments
// say.
func TestDeployConfig(t *testing.T) {
	cfg, err := rlconfig.LoadDir("../../deploy/rls", rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sk := cfg.Skipped(); len(sk) != 0 {
		t.Errorf("entries not read: %v", sk)
	}
	for _, c := range []struct {
		entries []rlmatch.Entry
		want    string
	}{
		{[]rlmatch.Entry{{Key: "remote_address", Value: "192.0.2.1"}}, "edge.remote_address: 5/minute sliding-window"},
		{[]rlmatch.Entry{{Key: "path", Value: "/"}, {Key: "remote_address", Value: "192.0.2.1"}}, "edge.path.remote_address: 100/minute fixed-window"},
	} {
		m := (*rlmatch.Config)(cfg).Match("edge", c.entries)
		if len(m.Limits) != 1 || m.Limits[0].String() != c.want {
			t.Errorf("%v: %v, want %s", c.entries, m.Limits, c.want)
		}
	}
	if m := (*rlmatch.Config)(cfg).Match("edge", []rlmatch.Entry{{Key: "path", Value: "/"}, {Key: "remote_address", Value: "a"}}); m.FailureMode != enforce.FailOpen {
		t.Errorf("path and address: failure_mode %v, want open", m.FailureMode)
	}
}

// Server reflection, which lists the services to any caller, is off
// unless GRPC_REFLECTION asks for it.
func TestReflectionIsOptIn(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte("domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		vars := map[string]string{"CONFIG_DIR": dir}
		if on {
			vars["GRPC_REFLECTION"] = "true"
		}
		r := startServe(t, vars)
		conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err == nil {
			err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		}
		if err == nil {
			_, err = stream.Recv()
		}
		conn.Close()
		if got := status.Code(err); (got == codes.OK) != on {
			t.Errorf("GRPC_REFLECTION=%v: reflection answered %v", on, err)
		}
	}
}

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is read with upstream's
// meaning; unset, files keep floodgate's default and xDS (Envoy Gateway,
// whose charges after the response need it) takes upstream's.
func TestCountOverLimitSetting(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"CONFIG_DIR": "/c"}, false},
		{map[string]string{"CONFIG_DIR": "/c", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"}, true},
		{map[string]string{"CONFIG_DIR": "/c", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, false},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "xds:18000", "CONFIG_GRPC_XDS_NODE_ID": "n"}, true},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "xds:18000", "CONFIG_GRPC_XDS_NODE_ID": "n", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, false},
	} {
		cfg, err := parseServe(nil, func(k string) string { return c.env[k] })
		if err != nil || cfg.CountOverLimit != c.want {
			t.Errorf("%v: CountOverLimit %v, %v; want %v", c.env, cfg.CountOverLimit, err, c.want)
		}
	}
	if _, err := parseServe(nil, func(k string) string {
		return map[string]string{"CONFIG_DIR": "/c", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "maybe"}[k]
	}); err == nil || !strings.Contains(err.Error(), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		t.Errorf("a value that is not a boolean: %v", err)
	}
}

// TestOversizedAddendRecordedPastTheLimit checks what docs/SERVICE.md
// says of a hits_addend larger than the limit: OVER_LIMIT, and recorded
// whole where hits count past their limits
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false, the default under xDS),
// so that the next request of 1 is over the limit too; not recorded
// otherwise.
func TestOversizedAddendRecordedPastTheLimit(t *testing.T) {
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "rl.yaml"), []byte("domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stop string
		next rlsv3.RateLimitResponse_Code // a request of 1 after the oversized one
	}{
		{"false", rlsv3.RateLimitResponse_OVER_LIMIT},
		{"true", rlsv3.RateLimitResponse_OK},
	} {
		t.Run("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+tc.stop, func(t *testing.T) {
			r := startServe(t, map[string]string{"CONFIG_DIR": conf, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": tc.stop})
			c := r.client(t)
			call := func(addend uint32) rlsv3.RateLimitResponse_Code {
				t.Helper()
				resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", HitsAddend: addend, Descriptors: []*commonv3.RateLimitDescriptor{
					{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}},
				}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.GetOverallCode()
			}
			if got := call(10); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("hits_addend 10 over a limit of 5: %v, want OVER_LIMIT", got)
			}
			if got := call(1); got != tc.next {
				t.Errorf("then hits_addend 1: %v, want %v", got, tc.next)
			}
		})
	}
}
