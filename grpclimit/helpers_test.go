package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/promtest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The methods of the test service.
const (
	emptyCall  = testpb.TestService_EmptyCall_FullMethodName
	unaryCall  = testpb.TestService_UnaryCall_FullMethodName
	streamCall = testpb.TestService_StreamingOutputCall_FullMethodName
	duplexCall = testpb.TestService_FullDuplexCall_FullMethodName
)

// env is an Enforcer on a fake-clock memstore behind a fault injector.
type env struct {
	lim   *floodgate.Limiter
	clock *storetest.FakeClock
	fault *faultstore.Store
	enf   *enforce.Enforcer
	reg   *prometheus.Registry
	logs  *syncbuf.Buffer
}

type envOptions struct {
	opts    enforce.Options // Interceptors, Registerer and Logger are filled in
	timeout time.Duration   // the decision budget; zero means 20ms
	store   floodgate.Store // zero means the fake-clock memstore
	// overrides are the limiter's (floodgate.Options.Overrides); nil for none
	overrides floodgate.Overrides
}

func newEnv(t testing.TB, eo envOptions) *env {
	t.Helper()
	e := &env{clock: storetest.NewFakeClock(), reg: prometheus.NewRegistry(), logs: new(syncbuf.Buffer)}
	store := eo.store
	if store == nil {
		ms := memstore.New(memstore.Options{Now: e.clock.Now})
		t.Cleanup(func() { ms.Close() })
		store = ms
	}
	e.fault = faultstore.New(store)
	if eo.timeout == 0 {
		eo.timeout = 20 * time.Millisecond
	}
	lim, err := floodgate.New(e.fault, floodgate.Options{Timeout: eo.timeout, Overrides: eo.overrides})
	if err != nil {
		t.Fatal(err)
	}
	e.lim = lim
	o := eo.opts
	o.Limiter, o.Registerer = lim, e.reg
	o.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	if e.enf, err = enforce.New(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.enf.Close() })
	return e
}

// service is the test service: it records the Result each handler finds,
// and refunds it when asked.
type service struct {
	testpb.UnimplementedTestServiceServer

	mu      sync.Mutex
	results []result // guarded by mu
}

// result is what a handler found in its context.
type result struct {
	res enforce.Result
	ok  bool
}

func (s *service) record(ctx context.Context) {
	r, ok := grpclimit.FromContext(ctx)
	s.mu.Lock()
	s.results = append(s.results, result{r, ok})
	s.mu.Unlock()
}

// last returns the Result the latest handler found.
func (s *service) last(t testing.TB) result {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.results) == 0 {
		t.Fatal("no handler ran")
	}
	return s.results[len(s.results)-1]
}

// calls returns how many handlers ran.
func (s *service) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.results)
}

func (s *service) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.record(ctx)
	return new(testpb.Empty), nil
}

// refundKey is the metadata key that asks UnaryCall to refund its call:
// "*" for every policy, or a policy name.
const refundKey = "x-refund"

// UnaryCall refunds its call's hits as refundKey asks.
func (s *service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.record(ctx)
	if v := metadata.ValueFromIncomingContext(ctx, refundKey); len(v) > 0 {
		r, _ := grpclimit.FromContext(ctx)
		var policies []string
		if v[0] != "*" {
			policies = v
		}
		if err := r.Refund(ctx, policies...); err != nil {
			return nil, err
		}
	}
	return new(testpb.SimpleResponse), nil
}

// StreamingOutputCall sends one response per ResponseParameters.
func (s *service) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.record(st.Context())
	for range req.GetResponseParameters() {
		if err := st.Send(new(testpb.StreamingOutputCallResponse)); err != nil {
			return err
		}
	}
	return nil
}

// FullDuplexCall answers each message with one, until the client closes.
func (s *service) FullDuplexCall(st grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	s.record(st.Context())
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := st.Send(new(testpb.StreamingOutputCallResponse)); err != nil {
			return err
		}
	}
}

// userKey is the metadata key that the test's authentication reads.
const userKey = "x-user"

// auth is an authentication interceptor: the principal is the x-user
// metadata, when present.
func auth(ctx context.Context) context.Context {
	if v := metadata.ValueFromIncomingContext(ctx, userKey); len(v) > 0 {
		return grpclimit.WithPrincipal(ctx, v[0])
	}
	return ctx
}

// authedStream is a server stream whose context went through auth.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authedStream) Context() context.Context { return s.ctx }

// serverOptions are the interceptors of a server limited by gl: auth, then
// the limit.
func serverOptions(gl *grpclimit.Interceptors) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(auth(ctx), req)
			},
			gl.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				return h(srv, authedStream{ss, auth(ss.Context())})
			},
			gl.StreamServerInterceptor()),
	}
}

// serve builds the Interceptors of opts on e's Enforcer and starts the test
// service on a loopback port behind its interceptors (or behind the
// server options that opt returns, if set). It returns a client of it and
// the service.
func (e *env) serve(t testing.TB, opts grpclimit.Options, opt ...func(*grpclimit.Interceptors) []grpc.ServerOption) (testpb.TestServiceClient, *service) {
	t.Helper()
	opts.Enforcer = e.enf
	gl, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	so := serverOptions
	if len(opt) > 0 {
		so = opt[0]
	}
	return start(t, so(gl)...)
}

// start serves the test service on a loopback port with opts and returns
// a client of it.
func start(t testing.TB, opts ...grpc.ServerOption) (testpb.TestServiceClient, *service) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	svc := new(service)
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return testpb.NewTestServiceClient(conn), svc
}

// withMD returns a context whose outgoing metadata holds the pairs.
func withMD(pairs ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), pairs...)
}

// answer is what a client got for one call.
type answer struct {
	err    error
	st     *status.Status
	header metadata.MD
	retry  time.Duration // the RetryInfo's delay; -1 without one
	quota  []*errdetails.QuotaFailure_Violation
	nquota int // how many QuotaFailure details
}

func newAnswer(err error, header metadata.MD) answer {
	a := answer{err: err, st: status.Convert(err), header: header, retry: -1}
	for _, d := range a.st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			a.retry = d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			a.nquota++
			a.quota = append(a.quota, d.GetViolations()...)
		}
	}
	return a
}

// empty calls EmptyCall with ctx.
func empty(t testing.TB, c testpb.TestServiceClient, ctx context.Context) answer {
	t.Helper()
	var h metadata.MD
	_, err := c.EmptyCall(ctx, new(testpb.Empty), grpc.Header(&h))
	return newAnswer(err, h)
}

// field returns the single value of the metadata key k, or "" (and fails
// t if there are several).
func (a answer) field(t testing.TB, k string) string {
	t.Helper()
	v := a.header.Get(k)
	switch len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	}
	t.Fatalf("metadata %s has %d values %q, want one", k, len(v), v)
	return ""
}

func rule(t testing.TB, name string, limit int64, window time.Duration) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// metric returns the sum of the values of the metrics called name whose
// labels include labels (counters, gauges, histogram sample counts).
func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return promtest.Sum(t, reg, name, labels)
}

// grpcHeader is grpc.Header: the call option that collects the response
// metadata.
var grpcHeader = grpc.Header

// mustResolver returns a clientip.Resolver that trusts the proxies.
func mustResolver(t testing.TB, trusted []string) *clientip.Resolver {
	t.Helper()
	res, err := clientip.New(clientip.Options{TrustedProxies: trusted})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
