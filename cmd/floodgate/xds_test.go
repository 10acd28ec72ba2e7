package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/internal/testcerts"
	"github.com/floodgate-rl/floodgate/internal/xdstest"
)

// egNode is the node id Envoy Gateway gives its rate-limit deployment.
const egNode = "envoy-ratelimit"

// perMinute is one resource: domain d with a per-minute limit of n on
// key k.
func perMinute(d, k string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: d, Domain: d, Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: k, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n}},
	}}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// eventually polls cond until it holds, failing the test after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// metric returns the line of /metrics that starts with series.
func (r *running) metric(t *testing.T, series string) string {
	t.Helper()
	_, body := get(t, "http://"+r.http+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series) {
			return line
		}
	}
	return ""
}

// egEnv is the environment Envoy Gateway gives its rate-limit deployment
// (internal/infrastructure/kubernetes/ratelimit), its files in certs and
// its xDS server at xdsAddr, with fast reconnects for the test.
func egEnv(certs, xdsAddr, redisAddr, prefix string) map[string]string {
	return map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "true", "STATSD_PORT": "9125",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xdsAddr, "CONFIG_GRPC_XDS_NODE_ID": egNode,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"GRPC_SERVER_TLS_KEY": filepath.Join(certs, "tls.key"), "GRPC_SERVER_TLS_CA_CERT": filepath.Join(certs, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": filepath.Join(certs, "tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(certs, "ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr,
		// Not Envoy Gateway's: the test's address is an IP, which its
		// certificate does not name; and reconnects within milliseconds.
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":      "envoy-gateway",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "50ms",
		"CACHE_KEY_PREFIX": prefix,
	}
}

// egXDS starts an xDS server as Envoy Gateway's: TLS 1.3, a client
// certificate required.
func egXDS(t *testing.T, ca *testcerts.CA, addr string) *xdstest.Server {
	return xdstest.Start(t, addr, &tls.Config{
		Certificates: []tls.Certificate{ca.Pair(t, "envoy-gateway", "envoy-gateway")},
		ClientCAs:    ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	})
}

// envoyClient connects as Envoy does to the service: TLS, with its
// client certificate when cert is true.
func envoyClient(t *testing.T, r *running, ca *testcerts.CA, cert bool) rlsv3.RateLimitServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "envoy-ratelimit"}
	if cert {
		cfg.Certificates = []tls.Certificate{ca.Pair(t, "envoy", "envoy")}
	}
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func decide(c rlsv3.RateLimitServiceClient, domain, key, value string) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}})
	return resp.GetOverallCode(), err
}

// admits returns how many of n calls for value were allowed, failing the
// test on an error.
func admits(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		code, err := decide(c, domain, key, value)
		if err != nil {
			t.Fatalf("ShouldRateLimit %s %s=%s: %v", domain, key, value, err)
		}
		if code == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// TestServeEnvoyGateway runs the service as Envoy Gateway deploys it, on
// real Redis, against an xDS server built as Envoy Gateway's, both
// connections over mutual TLS: before the first snapshot it answers as
// upstream (an error); the first snapshot decides; a changed one takes
// effect; an invalid one is NACKed with the reason while the last good
// one keeps deciding; the xDS server killed and restarted on its port
// sends a new snapshot, which is taken.
func TestServeEnvoyGateway(t *testing.T) {
	redisAddr := redistest.Addr(t)
	ca := testcerts.NewCA(t, "envoy-gateway CA")
	certs := t.TempDir()
	ca.Files(t, certs, "envoy-ratelimit", "envoy-ratelimit", "envoy-gateway")
	xds := egXDS(t, ca, "127.0.0.1:0")
	vars := egEnv(certs, xds.Addr, redisAddr, "xdstest-"+randomHex(t)+":")
	vars["JSON_ADDR"] = "127.0.0.1:0"
	r := startServe(t, vars)
	c := envoyClient(t, r, ca, true)

	// Before the first snapshot, as upstream: an error, so that Envoy's
	// failure_mode_deny decides; the health check passes.
	if _, err := decide(c, "edge", "ip", "192.0.2.1"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Errorf("before any configuration: %v, want Unavailable: no rate limit configuration loaded", err)
	}
	// POST /json: not on the plain HTTP listener, since gRPC requires
	// client certificates; on JSON_ADDR, over TLS, 503.
	if code, body := postJSON(t, "http://"+r.http+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"ip","value":"x"}]}]}`); code != 404 {
		t.Errorf("/json on HTTP_ADDR under client certificates: %d %s, want 404", code, body)
	}
	envoyCert := ca.Pair(t, "envoy", "envoy")
	if code, body, _, err := postAs(jsonClient(ca, &envoyCert, false), "https://"+r.json+"/json", "application/json",
		`{"domain":"edge","descriptors":[{"entries":[{"key":"ip","value":"x"}]}]}`); err != nil || code != 503 {
		t.Errorf("/json before any configuration: %d %s %v, want 503", code, body, err)
	}
	if code, _ := get(t, "http://"+r.http+"/healthcheck"); code != 200 {
		t.Errorf("/healthcheck before any configuration: %d, want 200 (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED is not set)", code)
	}
	// The listener verifies client certificates (GRPC_SERVER_TLS_CA_CERT).
	if _, err := decide(envoyClient(t, r, ca, false), "edge", "ip", "x"); status.Code(err) != codes.Unavailable {
		t.Errorf("a client without a certificate: %v, want a failed handshake", err)
	}

	xds.Set(t, egNode, "1", perMinute("edge", "ip", 2))
	eventually(t, "the first snapshot in force", func() bool {
		_, err := decide(c, "edge", "ip", "192.0.2.100")
		return err == nil
	})
	if n := admits(t, c, "edge", "ip", "192.0.2.1", 4); n != 2 {
		t.Errorf("version 1 (2 a minute) admitted %d of 4", n)
	}
	ack := xds.WaitRequest(t, "ACK of version 1", func(q *discovery.DiscoveryRequest) bool { return q.GetVersionInfo() == "1" })
	if v, _ := xds.SentVersion(ack.GetResponseNonce()); v != "1" || ack.GetErrorDetail() != nil {
		t.Errorf("ACK with the nonce of version %q and error %v", v, ack.GetErrorDetail())
	}

	xds.Set(t, egNode, "2", perMinute("edge", "ip", 5))
	eventually(t, "version 2 in force", func() bool { return r.metric(t, `floodgate_xds_config_info{version="2"}`) != "" })
	if n := admits(t, c, "edge", "ip", "192.0.2.2", 7); n != 5 {
		t.Errorf("version 2 (5 a minute) admitted %d of 7", n)
	}

	xds.Set(t, egNode, "3", &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "ip", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}, // no unit
	}})
	nack := xds.WaitRequest(t, "NACK", func(q *discovery.DiscoveryRequest) bool { return q.GetErrorDetail() != nil })
	if !strings.Contains(nack.GetErrorDetail().GetMessage(), "edge.yaml: edge.ip: a rate limit needs a unit") || nack.GetVersionInfo() != "2" {
		t.Errorf("NACK %v with version_info %q; want the reason and version 2", nack.GetErrorDetail(), nack.GetVersionInfo())
	}
	if n := admits(t, c, "edge", "ip", "192.0.2.3", 7); n != 5 {
		t.Errorf("after the NACK, version 2 (5 a minute) admitted %d of 7", n)
	}
	if line := r.metric(t, "floodgate_xds_nacks_total"); line == "" || strings.HasSuffix(line, " 0") {
		t.Errorf("floodgate_xds_nacks_total: %q, want at least 1", line)
	}

	addr := xds.Addr
	xds.Stop()
	eventually(t, "disconnected", func() bool { return r.metric(t, "floodgate_xds_connected") == "floodgate_xds_connected 0" })
	if n := admits(t, c, "edge", "ip", "192.0.2.4", 7); n != 5 {
		t.Errorf("with the xDS server gone, version 2 (5 a minute) admitted %d of 7", n)
	}
	back := egXDS(t, ca, addr)
	back.Set(t, egNode, "4", perMinute("edge", "ip", 1), perMinute("api", "user", 3))
	eventually(t, "version 4 from the restarted server", func() bool { return r.metric(t, `floodgate_xds_config_info{version="4"}`) != "" })
	if n := admits(t, c, "edge", "ip", "192.0.2.5", 3); n != 1 {
		t.Errorf("version 4 (1 a minute) admitted %d of 3", n)
	}
	if n := admits(t, c, "api", "user", "ana", 4); n != 3 {
		t.Errorf("version 4's new domain (3 a minute) admitted %d of 4", n)
	}
	if code, _ := get(t, "http://"+r.http+"/rlconfig"); code != 404 {
		t.Errorf("/rlconfig on the public port: %d, want 404 (DEBUG_ADDR alone serves it)", code)
	}
	// Envoy Gateway's rate limiting with cost, over xDS (whose hits count
	// past their limits, as upstream counts them): a check on the
	// request, the response's cost charged at its end, as
	// envoyproxy/ratelimit answers it.
	back.Set(t, egNode, "5", perMinute("edge", "ip", 1), perMinute("api", "user", 3), perMinute("ai", "user", 100))
	eventually(t, "version 5", func() bool { return r.metric(t, `floodgate_xds_config_info{version="5"}`) != "" })
	var flow []string
	for _, addend := range []uint64{0, 40, 0, 40, 0, 40, 0} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries:    []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ana"}},
			HitsAddend: wrapperspb.UInt64(addend),
		}}})
		cancel()
		if err != nil {
			t.Fatalf("cost flow: %v", err)
		}
		flow = append(flow, fmt.Sprintf("%d %v(%d)", addend, resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()))
	}
	if got, want := strings.Join(flow, ", "), "0 OK(100), 40 OK(60), 0 OK(60), 40 OK(20), 0 OK(20), 40 OVER_LIMIT(0), 0 OVER_LIMIT(0)"; got != want {
		t.Errorf("cost flow over xDS:\n got %s\nwant %s", got, want)
	}
	for _, want := range []string{"RUNTIME_ROOT is ignored", "envoyproxy/ratelimit statistics", "rejected (NACK)", "xDS server lost or unreachable"} {
		if !strings.Contains(r.logs.String(), want) {
			t.Errorf("the logs do not say %q:\n%s", want, r.logs.String())
		}
	}
}

// TestServeWaitsForFirstConfig: without FORCE_START_WITHOUT_INITIAL_CONFIG
// the service listens only once the first configuration is in force, as
// upstream; stopped while it waits, it exits cleanly.
func TestServeWaitsForFirstConfig(t *testing.T) {
	xds := xdstest.Start(t, "127.0.0.1:0", nil)
	vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.Addr, "CONFIG_GRPC_XDS_NODE_ID": egNode,
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms", "GRPC_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0"}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	lw := &syncbuf.Buffer{}
	go func() {
		done <- serve(ctx, nil, env(vars), lw, serveHooks{ready: func(string, string, string) { t.Error("served before any configuration") }})
	}()
	xds.WaitRequest(t, "subscription", func(*discovery.DiscoveryRequest) bool { return true })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("stopped while waiting: exit %d, want 0\n%s", code, lw.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s")
	}

	// With a snapshot, it serves it from the first call.
	xds.Set(t, egNode, "1", perMinute("edge", "ip", 1))
	r := startServe(t, vars)
	c := r.client(t)
	if code, err := decide(c, "edge", "ip", "a"); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Errorf("first call: %v, %v", code, err)
	}
	if code, err := decide(c, "edge", "ip", "a"); err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second call: %v, %v; want OVER_LIMIT", code, err)
	}
}

// TestServeHealthyWithConfig: with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// the health checks fail, saying why, until a configuration with a domain
// is in force, and again when one without any is.
func TestServeHealthyWithConfig(t *testing.T) {
	xds := xdstest.Start(t, "127.0.0.1:0", nil)
	r := startServe(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.Addr,
		"CONFIG_GRPC_XDS_NODE_ID": egNode, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10ms",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"})
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		res, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetStatus()
	}
	watch, err := health.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		res, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return res.GetStatus()
	}

	if code, body := get(t, "http://"+r.http+"/healthcheck"); code != 503 || !strings.Contains(body, "waiting for the first from the xDS server") {
		t.Errorf("/healthcheck before any configuration: %d %q", code, body)
	}
	if st := check(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check before any configuration: %v", st)
	}
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch before any configuration: %v", st)
	}

	xds.Set(t, egNode, "1", perMinute("edge", "ip", 1))
	if st := next(); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch after the first configuration: %v", st)
	}
	if code, _ := get(t, "http://"+r.http+"/healthcheck"); code != 200 || check() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("/healthcheck after the first configuration: %d", code)
	}

	// Envoy Gateway sends an empty snapshot when its last policy goes.
	xds.Set(t, egNode, "2")
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch after an empty configuration: %v", st)
	}
	if code, body := get(t, "http://"+r.http+"/healthcheck"); code != 503 || !strings.Contains(body, "has no domain") {
		t.Errorf("/healthcheck after an empty configuration: %d %q", code, body)
	}
	// Requests are answered: every domain is unknown, and OK.
	if code, err := decide(r.client(t), "edge", "ip", "a"); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Errorf("a call under the empty configuration: %v, %v; want OK", code, err)
	}
}

// TestServerTLSRotation: the gRPC listener serves a certificate swapped
// in on disk (as a Kubernetes secret's update does) from the next
// handshake on, and keeps the old one while the new files do not parse.
func TestServerTLSRotation(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	cert, key, caFile := ca.Files(t, dir, "one", "one")
	cfg, err := serverTLS(grpcTLS{Cert: cert, Key: key, ClientCA: caFile, ClientSAN: "envoy"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil || c.VerifyConnection == nil {
			t.Error("client certificates are not required and verified")
		}
		leaf := c.Certificates[0].Leaf
		return leaf.Subject.CommonName
	}
	if cn := served(); cn != "one" {
		t.Fatalf("serves %q, want one", cn)
	}
	// A new pair, renamed into place.
	c2, k2 := ca.Issue(t, "two", "two")
	for p, b := range map[string][]byte{cert: c2, key: k2} {
		if err := os.WriteFile(p+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
	}
	if cn := served(); cn != "two" {
		t.Errorf("after the swap serves %q, want two", cn)
	}
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := served(); cn != "two" {
		t.Errorf("with a broken file serves %q, want two still", cn)
	}
}

// TestEnvoyGatewayEnvironment: the environment Envoy Gateway generates is
// read whole, each variable as upstream reads it.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	vars := egEnv("/certs", "envoy-gateway:18001", "redis.redis.svc:6379", "")
	for _, name := range []string{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "CACHE_KEY_PREFIX"} {
		delete(vars, name) // the test's own
	}
	// What newer Envoy Gateways add when Prometheus is on.
	mapping := filepath.Join(t.TempDir(), "conf.yaml") // the mapping is read at start: a file that is not there is refused
	if err := os.WriteFile(mapping, []byte("mappings:\n  - match: \"ratelimit.service.config_load_success\"\n    name: \"ratelimit_service_config_load_success\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars["USE_PROMETHEUS"], vars["PROMETHEUS_ADDR"], vars["PROMETHEUS_MAPPER_YAML"] = "true", ":19001", mapping
	c, err := parseServe(nil, env(vars))
	if err != nil {
		t.Fatal(err)
	}
	want := xdsSettings{Server: "envoy-gateway:18001", NodeID: egNode, ForceStart: true, RuntimeIgnored: true,
		TLS: &xdsTLS{Cert: "/certs/tls.crt", Key: "/certs/tls.key", CA: "/certs/ca.crt"}}
	if c.XDS == nil || c.XDS.Server != want.Server || c.XDS.NodeID != want.NodeID || !c.XDS.ForceStart || !c.XDS.RuntimeIgnored ||
		c.XDS.TLS == nil || *c.XDS.TLS != *want.TLS || c.ConfigDir != "" {
		t.Errorf("xDS: %+v (TLS %+v), want %+v (TLS %+v)", c.XDS, c.XDS.TLS, want, want.TLS)
	}
	if c.GRPCTLS == nil || *c.GRPCTLS != (grpcTLS{Cert: "/certs/tls.crt", Key: "/certs/tls.key", ClientCA: "/certs/ca.crt"}) {
		t.Errorf("gRPC TLS: %+v", c.GRPCTLS)
	}
	if c.RedisURL != "redis://redis.redis.svc:6379" || c.Stats == nil || !c.Stats.Statsd || c.Stats.Port != 9125 || c.HealthyWithConfig || c.DebugAddr != ":19001" {
		t.Errorf("%+v", c)
	}

	// Upstream's other xDS variables.
	c, err = parseServe(nil, env(map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a, team=b=c,", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1,x-b:2:3",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "30s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.2",
		"XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	x := c.XDS
	if x.Server != "localhost:18000" || x.NodeID != "default" || x.ForceStart || x.NodeMetadata["zone"] != "a" || x.NodeMetadata["team"] != "b=c" ||
		x.Headers["x-a"] != "1" || x.Headers["x-b"] != "2:3" || x.MaxMsgSize != 8<<20 || !c.HealthyWithConfig {
		t.Errorf("%+v", x)
	}
	if x.Backoff.Initial != time.Second || x.Backoff.Max != 30*time.Second || x.Backoff.RandomFactor != 0.2 || !x.Backoff.NoJitter {
		t.Errorf("backoff %+v", x.Backoff)
	}
}
