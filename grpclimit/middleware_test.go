package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

var _ ratelimit.Limiter = (*grpclimit.Interceptors)(nil)

// middleware serves through go-grpc-middleware's ratelimit interceptors.
func middleware(gl *grpclimit.Interceptors) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(gl)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(gl)),
	}
}

// Through go-grpc-middleware: the same decisions and metadata, the
// denial's text, but none of the status details.
func TestGoGRPCMiddleware(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{
		Methods: map[string]grpclimit.Method{
			emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "calls", 2, time.Minute), Key: grpclimit.ClientIP(nil)}}},
		},
		Default: grpclimit.Method{Limits: []grpclimit.Limit{{Rule: rule(t, "streams", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	}, middleware)
	ctx := context.Background()
	for i, want := range []string{`"calls";r=1;t=60`, `"calls";r=0;t=60`} {
		a := empty(t, c, ctx)
		if a.err != nil {
			t.Fatalf("call %d: %v", i+1, a.err)
		}
		if got := a.field(t, grpclimit.MetadataRateLimit); got != want {
			t.Errorf("call %d: ratelimit %q, want %q", i+1, got, want)
		}
	}
	e.clock.Advance(10 * time.Second)
	a := empty(t, c, ctx)
	const want = "/grpc.testing.TestService/EmptyCall is rejected by grpc_ratelimit middleware, please retry later. " +
		"rpc error: code = ResourceExhausted desc = quota exceeded: 2 requests per 60 s (calls); retry after 50 s"
	if a.st.Code() != codes.ResourceExhausted || a.st.Message() != want {
		t.Errorf("denial %v, want ResourceExhausted %q", a.err, want)
	}
	if a.retry != -1 || a.nquota != 0 {
		t.Errorf("go-grpc-middleware kept the details (RetryInfo %v, %d QuotaFailures): update the Limit doc", a.retry, a.nquota)
	}
	if got, want := a.field(t, grpclimit.MetadataRateLimit), `"calls";r=0;t=50`; got != want {
		t.Errorf("denial's ratelimit %q, want %q", got, want)
	}
	if r := svc.last(t); r.ok {
		t.Errorf("the handler found a Result through go-grpc-middleware: update the Limit doc")
	}

	// Stream opens, under the Default.
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		st, err := c.StreamingOutputCall(ctx, new(testpb.StreamingOutputCallRequest))
		if err != nil {
			t.Fatal(err)
		}
		if _, err = st.Recv(); errors.Is(err, io.EOF) {
			err = nil
		}
		if got := status.Code(err); got != want {
			t.Errorf("stream %d: %v, want %v", i+1, err, want)
		}
	}
	for _, m := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"gate": emptyCall, "outcome": "allowed"}, 2},
		{map[string]string{"gate": emptyCall, "outcome": "denied"}, 1},
		{map[string]string{"gate": grpclimit.DefaultGate, "outcome": "allowed"}, 1},
		{map[string]string{"gate": grpclimit.DefaultGate, "outcome": "denied"}, 1},
	} {
		if got := metric(t, e.reg, "floodgate_decisions_total", m.labels); got != m.want {
			t.Errorf("decisions%v = %v, want %v", m.labels, got, m.want)
		}
	}
}

// Limit called outside a server call (no method in the context) applies
// the Default, and returns the status a fail-closed method answers.
func TestLimitOutsideACall(t *testing.T) {
	e := newEnv(t, envOptions{})
	gl, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf, Default: grpclimit.Method{Failure: enforce.FailClosed,
		Limits: []grpclimit.Limit{{Rule: rule(t, "jobs", 1, time.Minute), Key: grpclimit.Principal}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := grpclimit.WithPrincipal(context.Background(), "worker-1")
	if err := gl.Limit(ctx); err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := gl.Limit(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second: %v, want ResourceExhausted", err)
	}
	if err := gl.Limit(context.Background()); err != nil {
		t.Fatalf("without a principal (skipped): %v", err)
	}
	e.fault.Set(faultstore.Fail)
	err = gl.Limit(grpclimit.WithPrincipal(context.Background(), "worker-2"))
	if a := newAnswer(err, nil); a.st.Code() != codes.Unavailable || a.retry != grpclimit.MinFailRetryAfter {
		t.Fatalf("store down: %v, RetryInfo %v; want Unavailable, %v", err, a.retry, grpclimit.MinFailRetryAfter)
	}
	if got := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"gate": grpclimit.DefaultGate, "outcome": "failed_closed"}); got != 1 {
		t.Errorf("decisions{outcome=failed_closed} = %v, want 1", got)
	}
}
