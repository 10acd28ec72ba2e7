package rls_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// service is one instance of the service on loopback: its Server, a
// gRPC client of it (what Envoy calls) and its HTTP address.
type service struct {
	srv    *rls.Server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	url    string // the HTTP server's base URL
	reg    *prometheus.Registry
}

// setup describes an instance: its configuration (a directory, or one
// YAML file written to a fresh one) and its store.
type setup struct {
	dir     string
	yaml    string
	store   floodgate.Store
	timeout time.Duration // the decision budget; zero means 2s
	breaker *breakerstore.Store
	shadow  bool    // Options.ShadowMode
	near    float64 // Options.NearLimitRatio
	// overrides gives keys limits of their own (floodgate.Options.Overrides).
	overrides floodgate.Overrides
	countOver bool // Options.CountOverLimit
	// headers is Options.Headers; nil means the draft-11 fields alone,
	// which most tests read.
	headers  *rls.Headers
	quota    bool // Options.QuotaMode
	metadata bool // Options.DynamicMetadata
}

// start starts an instance that t's cleanup stops.
func start(t testing.TB, s setup) *service {
	t.Helper()
	if s.dir == "" {
		s.dir = configDir(t, map[string]string{"config.yaml": s.yaml})
	}
	timeout := s.timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	lim, err := floodgate.New(s.store, floodgate.Options{Timeout: timeout, Overrides: s.overrides})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	enf, err := enforce.New(enforce.Options{Limiter: lim, Breaker: s.breaker, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	headers := rls.Headers{Draft: true}
	if s.headers != nil {
		headers = *s.headers
	}
	srv, err := rls.New(rls.WithDebounce(rls.Options{Enforcer: enf, ConfigDir: s.dir, Registerer: reg, ShadowMode: s.shadow, NearLimitRatio: s.near, CountOverLimit: s.countOver, Headers: headers, QuotaMode: s.quota, DynamicMetadata: s.metadata}, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(srv.GRPCServerOptions()...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	hs := httptest.NewServer(srv.Handler())
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Close()
		g.Stop()
		srv.Close()
		enf.Close()
	})
	return &service{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, url: hs.URL, reg: reg}
}

// memEnforcer returns an Enforcer on a memstore Limiter, both closed when
// the test ends.
func memEnforcer(t testing.TB) *enforce.Enforcer {
	t.Helper()
	return loggingEnforcer(t, nil)
}

// loggingEnforcer is memEnforcer with logger as the Enforcer's (nil:
// enforce's default).
func loggingEnforcer(t testing.TB, logger *slog.Logger) *enforce.Enforcer {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enf, err := enforce.New(enforce.Options{Limiter: lim, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enf.Close() })
	return enf
}

// configDir writes files to a fresh directory.
func configDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// redisStore returns a store on the shared test Redis under prefix.
func redisStore(t testing.TB, url, prefix string) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(context.Background(), redisstore.Options{URL: url, Prefix: prefix, NoBreaker: true}) // tests that want one put their own in front
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// freshRedis returns a store on the shared test Redis with a prefix of
// its own, so that no other test's counts are seen.
func freshRedis(t testing.TB) *redisstore.Store {
	t.Helper()
	return redisStore(t, "redis://"+redistest.Addr(t), randomPrefix())
}

func randomPrefix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "rls" + hex.EncodeToString(b) + ":"
}

// desc builds a descriptor from "k=v" pairs.
func desc(kvs ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// peekDesc is desc with a hits_addend of 0.
func peekDesc(kvs ...string) *commonv3.RateLimitDescriptor {
	d := desc(kvs...)
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

func req(domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// call calls ShouldRateLimit and fails t on an error.
func (s *service) call(t *testing.T, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.client.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", r, err)
	}
	return resp
}

// header returns the value of the response header key, or "".
func header(resp *rlsv3.RateLimitResponse, key string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == key {
			return h.GetValue()
		}
	}
	return ""
}

// counter returns the value of the counter (or gauge) name with the
// given labels (all of them), or 0.
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	if len(m.GetLabel()) != len(labels) {
		return false
	}
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}
