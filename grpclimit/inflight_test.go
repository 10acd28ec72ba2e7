package grpclimit_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A concurrency limit holds a stream's slot until the stream ends, and a
// unary call's until its handler returns.
func TestCallsInFlight(t *testing.T) {
	e := newEnv(t, envOptions{})
	inflight := floodgate.Rule{Name: "inflight", Limit: 1, Window: time.Minute, Algorithm: floodgate.Concurrency}
	lim := []grpclimit.Limit{{Rule: inflight, Key: grpclimit.Metadata("x-user")}}
	gl, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		unaryCall: {Limits: lim}, duplexCall: {Limits: lim},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.UnaryServerInterceptor()), grpc.StreamInterceptor(gl.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, new(service))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := testpb.NewTestServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user", "ana")
	unary := func() codes.Code {
		_, err := c.UnaryCall(ctx, new(testpb.SimpleRequest))
		return status.Code(err)
	}

	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(new(testpb.StreamingOutputCallRequest)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the stream: %v", err) // admitted: its handler answered
	}
	var h metadata.MD
	_, err = c.UnaryCall(ctx, new(testpb.SimpleRequest), grpc.Header(&h))
	if a := newAnswer(err, h); status.Code(err) != codes.ResourceExhausted ||
		a.field(t, grpclimit.MetadataRateLimitPolicy) != `"inflight";q=1;qu="concurrent-requests"` {
		t.Fatalf("a call while the stream is open: %v, ratelimit-policy %q; want ResourceExhausted from a limit of 1 concurrent request",
			status.Code(err), a.field(t, grpclimit.MetadataRateLimitPolicy))
	}
	if a := newAnswer(err, h); len(a.quota) != 1 || a.quota[0].GetDescription() != "1 requests at once" || a.quota[0].GetQuotaValue() != 1 {
		t.Fatalf("QuotaFailure %v; want one violation of 1 requests at once", a.quota)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the stream's end: %v", err)
	}
	for i := range 2 {
		if code := unary(); code != codes.OK {
			t.Fatalf("call %d after the stream ended: %v; a stream releases its slot when it ends, a call when its handler returns", i+1, code)
		}
	}
}
