package xds

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/internal/testcerts"
	"github.com/floodgate-rl/floodgate/internal/xdstest"
)

const node = "envoy-ratelimit"

// TestMain checks that a closed Client leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fast reconnects within milliseconds, for tests.
var fast = Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, NoJitter: true}

// domain is one resource: domain d with a per-minute limit of n on key k.
func domain(name, d, k string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: d, Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: k, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n}},
	}}
}

// invalid has a limit without a unit.
func invalid() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "broken", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "ip", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 3}},
	}}
}

// applied records what Apply was given.
type applied struct {
	mu      sync.Mutex
	updates []Update
	refuse  error
}

func (a *applied) apply(u Update) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse != nil {
		return a.refuse
	}
	a.updates = append(a.updates, u)
	return nil
}

func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.NodeID == "" {
		opts.NodeID = node
	}
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = fast
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds, failing the test after 20 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func limitOf(c *Client, d, k string) int64 {
	cfg := c.Config()
	if cfg == nil {
		return -1
	}
	m := (*rlmatch.Config)(cfg).Match(d, []rlmatch.Entry{{Key: k, Value: "v"}})
	if m.Outcome != rlmatch.Limited {
		return -1
	}
	return m.Limits[0].RequestsPerUnit
}

func isNACK(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil }

// TestLoadChangeRejectRecover: the first snapshot is loaded and ACKed
// with its version and nonce; a changed one takes effect; an invalid one
// is NACKed with the reason and the version in force, which keeps
// deciding; the next valid one is taken.
func TestLoadChangeRejectRecover(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	reg := prometheus.NewRegistry()
	var a applied
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply, Registerer: reg})

	select {
	case <-c.Loaded():
	case <-time.After(20 * time.Second):
		t.Fatal("no configuration loaded within 20s")
	}
	if c.version() != "1" || limitOf(c, "edge", "ip") != 10 {
		t.Fatalf("version %q, limit %d; want 1 and 10", c.version(), limitOf(c, "edge", "ip"))
	}
	ack := srv.WaitRequest(t, "ACK of version 1", func(r *discovery.DiscoveryRequest) bool { return r.GetVersionInfo() == "1" })
	if v, ok := srv.SentVersion(ack.GetResponseNonce()); !ok || v != "1" || isNACK(ack) {
		t.Errorf("the ACK carries nonce %q (a response of version %q, %v) and error %v; want the nonce of version 1's response",
			ack.GetResponseNonce(), v, ok, ack.GetErrorDetail())
	}
	if got := testutil.ToFloat64(c.m.info.WithLabelValues("1")); got != 1 {
		t.Errorf("floodgate_xds_config_info{version=1} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.m.connected); got != 1 {
		t.Errorf("floodgate_xds_connected = %v, want 1", got)
	}

	srv.Set(t, node, "2", domain("edge", "edge", "ip", 20))
	waitFor(t, "version 2 in force", func() bool { return c.version() == "2" })
	if limitOf(c, "edge", "ip") != 20 {
		t.Errorf("limit %d after version 2, want 20", limitOf(c, "edge", "ip"))
	}

	srv.Set(t, node, "3", invalid())
	nack := srv.WaitRequest(t, "NACK", isNACK)
	if v, _ := srv.SentVersion(nack.GetResponseNonce()); v != "3" || nack.GetVersionInfo() != "2" ||
		nack.GetErrorDetail().GetCode() != int32(codes.InvalidArgument) || !strings.Contains(nack.GetErrorDetail().GetMessage(), "broken.yaml: edge.ip: a rate limit needs a unit") {
		t.Errorf("NACK of the response of version %q: version_info %q, error %v; want the nonce of version 3, version_info 2 and the reason",
			v, nack.GetVersionInfo(), nack.GetErrorDetail())
	}
	// go-control-plane sends the rejected snapshot again after each NACK:
	// wait for the second NACK, which comes after the Client's pause.
	srv.WaitRequest(t, "second NACK", func(r *discovery.DiscoveryRequest) bool { return isNACK(r) && r != nack })
	if c.version() != "2" || limitOf(c, "edge", "ip") != 20 {
		t.Errorf("after the NACK: version %q, limit %d; want version 2 still in force", c.version(), limitOf(c, "edge", "ip"))
	}
	if got := testutil.ToFloat64(c.m.nack); got < 2 {
		t.Errorf("floodgate_xds_nacks_total = %v, want at least 2", got)
	}

	srv.Set(t, node, "4", domain("edge", "edge", "ip", 40), domain("api", "api", "user", 5))
	waitFor(t, "version 4 in force", func() bool { return c.version() == "4" })
	if limitOf(c, "edge", "ip") != 40 || limitOf(c, "api", "user") != 5 {
		t.Errorf("after version 4: limits %d and %d, want 40 and 5", limitOf(c, "edge", "ip"), limitOf(c, "api", "user"))
	}
	if got := testutil.ToFloat64(c.m.info.WithLabelValues("4")); got != 1 {
		t.Errorf("floodgate_xds_config_info{version=4} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(c.m.info); n != 1 {
		t.Errorf("floodgate_xds_config_info has %d series, want 1 (the version in force)", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var versions []string
	for _, u := range a.updates {
		versions = append(versions, u.Version)
	}
	if strings.Join(versions, ",") != "1,2,4" {
		t.Errorf("Apply was given versions %v, want 1, 2 and 4", versions)
	}
}

// TestApplyRefusalIsNACKed: what Apply refuses is NACKed with its error,
// and nothing is in force.
func TestApplyRefusalIsNACKed(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	a := applied{refuse: errors.New("disk full")}
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply})
	nack := srv.WaitRequest(t, "NACK", isNACK)
	if nack.GetErrorDetail().GetMessage() != "disk full" || nack.GetVersionInfo() != "" {
		t.Errorf("NACK %v with version_info %q; want disk full and no version", nack.GetErrorDetail(), nack.GetVersionInfo())
	}
	if c.Config() != nil || c.version() != "" {
		t.Errorf("a configuration in force after Apply refused it: %v", c.Config())
	}
}

// TestServerLostAndBack: a server that dies changes nothing; the Client
// reconnects to the one that takes its address, and takes its snapshot.
func TestServerLostAndBack(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	var a applied
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply})
	waitFor(t, "version 1", func() bool { return c.version() == "1" })

	srv.Stop()
	waitFor(t, "disconnected", func() bool { return testutil.ToFloat64(c.m.connected) == 0 })
	if c.version() != "1" || limitOf(c, "edge", "ip") != 10 {
		t.Errorf("with the server gone: version %q, limit %d; want version 1 still in force", c.version(), limitOf(c, "edge", "ip"))
	}

	back := xdstest.Start(t, srv.Addr, nil)
	// The server restarted with a new cache: it asks for version 1 and is
	// sent the new snapshot.
	back.Set(t, node, "7", domain("edge", "edge", "ip", 70))
	waitFor(t, "version 7 from the restarted server", func() bool { return c.version() == "7" })
	if limitOf(c, "edge", "ip") != 70 {
		t.Errorf("limit %d, want 70", limitOf(c, "edge", "ip"))
	}
	first := back.WaitRequest(t, "subscription", func(*discovery.DiscoveryRequest) bool { return true })
	if first.GetVersionInfo() != "1" || first.GetResponseNonce() != "" || first.GetTypeUrl() != TypeURL || first.GetNode().GetId() != node {
		t.Errorf("the new stream's first request %v; want version 1, no nonce, the type and the node", first)
	}
	c.Close()
}

// TestLostServerLogSaysWhatIsInForce: the line logged at each failed
// connection says that the configuration in force stays only when there
// is one; before the first (a service started with
// FORCE_START_WITHOUT_INITIAL_CONFIG), it says that none is in force.
func TestLostServerLogSaysWhatIsInForce(t *testing.T) {
	var buf syncbuf.Buffer
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	addr := srv.Addr
	srv.Stop()
	c := newClient(t, Options{Server: addr, Apply: (&applied{}).apply, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	waitFor(t, "a failed connection logged", func() bool { return strings.Contains(buf.String(), "attempt=2") })
	c.Close()
	if out := buf.String(); !strings.Contains(out, "no rate-limit configuration is in force yet") || strings.Contains(out, "in force stays") {
		t.Errorf("before any configuration, the log says:\n%s\nwant that none is in force, never that one stays", out)
	}

	var buf2 syncbuf.Buffer
	srv = xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	c = newClient(t, Options{Server: srv.Addr, Apply: (&applied{}).apply, Logger: slog.New(slog.NewTextHandler(&buf2, nil))})
	waitFor(t, "version 1", func() bool { return c.version() == "1" })
	srv.Stop()
	waitFor(t, "a failed connection logged", func() bool { return strings.Contains(buf2.String(), "attempt=2") })
	c.Close()
	if out := buf2.String(); !strings.Contains(out, "the rate-limit configuration in force stays") || strings.Contains(out, "no rate-limit configuration is in force yet") {
		t.Errorf("with version 1 in force, the log says:\n%s\nwant that it stays", out)
	}
}

// TestSameResourcesNotAppliedAgain: a new version of what is in force is
// ACKed without calling Apply.
func TestSameResourcesNotAppliedAgain(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	var a applied
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply})
	waitFor(t, "version 1", func() bool { return c.version() == "1" })
	srv.Set(t, node, "2", domain("edge", "edge", "ip", 10))
	waitFor(t, "version 2", func() bool { return c.version() == "2" })
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.updates) != 1 {
		t.Errorf("Apply called %d times, want once", len(a.updates))
	}
}

// TestNodeAndHeaders: the node id and metadata, and the extra headers,
// reach the server.
func TestNodeAndHeaders(t *testing.T) {
	srv := xdstest.Start(t, "127.0.0.1:0", nil)
	srv.Set(t, "rl-1", "1", domain("edge", "edge", "ip", 10))
	var a applied
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply, NodeID: "rl-1",
		NodeMetadata: map[string]string{"zone": "a"}, Headers: map[string]string{"x-tenant": "t1"}})
	waitFor(t, "version 1", func() bool { return c.version() == "1" })
	r := srv.Requests()[0]
	if r.GetNode().GetId() != "rl-1" || r.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
		t.Errorf("node %v, want rl-1 with zone a", r.GetNode())
	}
	if h := srv.Headers(); len(h) == 0 || strings.Join(h[0].Get("x-tenant"), ",") != "t1" {
		t.Errorf("stream headers %v, want x-tenant: t1", h)
	}
}

// TestTLS: the Client verifies the server against its CA and the SAN it
// is told (the address is an IP the certificate does not name), and
// presents its certificate to a server that requires one, as Envoy
// Gateway's does; a wrong SAN never connects.
func TestTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "envoy-gateway CA")
	srvCfg := &tls.Config{
		Certificates: []tls.Certificate{ca.Pair(t, "envoy-gateway", "envoy-gateway")},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	srv := xdstest.Start(t, "127.0.0.1:0", srvCfg)
	srv.Set(t, node, "1", domain("edge", "edge", "ip", 10))
	client := ca.Pair(t, "envoy-ratelimit", "envoy-ratelimit")
	tlsFor := func(san string, calls *atomic.Int32) func() (*tls.Config, error) {
		return func() (*tls.Config, error) {
			calls.Add(1)
			return &tls.Config{RootCAs: ca.Pool(), ServerName: san, Certificates: []tls.Certificate{client}}, nil
		}
	}

	var good, bad atomic.Int32
	var a applied
	c := newClient(t, Options{Server: srv.Addr, Apply: a.apply, TLS: tlsFor("envoy-gateway", &good)})
	waitFor(t, "version 1 over TLS", func() bool { return c.version() == "1" })

	wrong := newClient(t, Options{Server: srv.Addr, Apply: a.apply, TLS: tlsFor("elsewhere", &bad)})
	waitFor(t, "a second attempt with the wrong SAN", func() bool { return bad.Load() >= 3 })
	if wrong.Config() != nil {
		t.Error("a Client that cannot verify the server took its configuration")
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second, NoJitter: true}
	var got []time.Duration
	for i := range 5 {
		got = append(got, b.delay(i, nil))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	j := Backoff{Initial: time.Second, Max: 4 * time.Second, RandomFactor: 0.25}
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 750 * time.Millisecond}, {0.5, time.Second}, {1, 1250 * time.Millisecond}} {
		if d := j.delay(0, func() float64 { return tc.r }); d != tc.want {
			t.Errorf("with random %v: %v, want %v", tc.r, d, tc.want)
		}
	}
	if d := (Backoff{}).delay(10, func() float64 { return 0.5 }); d != 60*time.Second {
		t.Errorf("the defaults cap at %v, want 60s", d)
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(Options{Backoff: Backoff{RandomFactor: 1}, MaxMessageSize: -1})
	for _, want := range []string{"Server is required", "Apply is required", "MaxMessageSize", "RandomFactor"} {
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(fmtErr(err), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestNACKLogAggregated: one line per interval, the first at once, each
// saying how many rejections it stands for; a new reason at once.
func TestNACKLogAggregated(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	n := nackLog{interval: time.Hour}
	bad := errors.New("bad unit")
	for range 3 {
		n.log(logger, "3", "2", bad)
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("%d lines for 3 rejections within the interval, want 1:\n%s", got, buf.String())
	}
	n.log(logger, "4", "2", errors.New("duplicate descriptor"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "bad unit") || !strings.Contains(lines[1], "rejections_not_logged=1") ||
		!strings.Contains(lines[2], "duplicate descriptor") || !strings.Contains(lines[2], "rejections_not_logged=0") {
		t.Fatalf("a new reason: %q, want the 2 held written (one line, itself and 1 more), then the new one at once", lines)
	}
	n.log(logger, "4", "2", errors.New("duplicate descriptor"))
	n.log(logger, "4", "2", errors.New("duplicate descriptor"))
	n.flush(logger)
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[3], "rejections_not_logged=1") {
		t.Errorf("the flush: %q, want one line for the 2 held (itself and 1 more)", lines)
	}
	if total := n.reset(); total != 6 {
		t.Errorf("reset says %d rejections, want 6", total)
	}
}
