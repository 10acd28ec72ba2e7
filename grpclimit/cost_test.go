package grpclimit_test

import (
	"context"
	"net"
	"strconv"
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

// settling is a test service whose unary handler settles the call's
// tokens with the actual cost the client sends in x-actual.
type settling struct {
	testpb.UnimplementedTestServiceServer
	t *testing.T
}

func (s settling) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	res, ok := grpclimit.FromContext(ctx)
	if !ok {
		s.t.Error("no Result in the handler's context")
		return &testpb.SimpleResponse{}, nil
	}
	if _, err := res.Settle(ctx, "tokens", mdInt(ctx, "x-actual")); err != nil {
		s.t.Error(err)
	}
	return &testpb.SimpleResponse{}, nil
}

func mdInt(ctx context.Context, key string) int64 {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) > 0 {
		n, _ := strconv.ParseInt(v[0], 10, 64)
		return n
	}
	return 0
}

// A method takes each call's estimated cost (Limit.Cost) and its handler
// settles the actual cost through the call's Result: an underrun is
// refunded, an overrun charged past the limit, and a key in debt is
// denied.
func TestCostSettledAfterTheCall(t *testing.T) {
	e := newEnv(t, envOptions{})
	tokens := floodgate.Rule{Name: "tokens", Limit: 1000, Window: time.Hour, Algorithm: floodgate.FixedWindow}
	gl, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		unaryCall: {Limits: []grpclimit.Limit{{Rule: tokens, Key: grpclimit.Metadata("x-user"),
			Cost: func(ctx context.Context) int64 { return mdInt(ctx, "x-estimate") }}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.UnaryServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, settling{t: t})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := testpb.NewTestServiceClient(conn)
	for i, step := range []struct {
		estimate, actual string
		code             codes.Code
		left             string // the ratelimit field, as the call was admitted
	}{
		{"300", "100", codes.OK, `"tokens";r=700;t=3600`},          // 200 back: 900 left
		{"400", "900", codes.OK, `"tokens";r=500;t=3600`},          // 500 more charged: 1,500 of 1,000
		{"1", "1", codes.ResourceExhausted, `"tokens";r=0;t=3600`}, // 500 in debt: denied
	} {
		var h metadata.MD
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ana", "x-estimate", step.estimate, "x-actual", step.actual)
		_, err := c.UnaryCall(ctx, new(testpb.SimpleRequest), grpc.Header(&h))
		if status.Code(err) != step.code || len(h.Get(grpclimit.MetadataRateLimit)) != 1 || h.Get(grpclimit.MetadataRateLimit)[0] != step.left {
			t.Fatalf("call %d: %v, ratelimit %q; want %v, %q", i+1, err, h.Get(grpclimit.MetadataRateLimit), step.code, step.left)
		}
	}
}
