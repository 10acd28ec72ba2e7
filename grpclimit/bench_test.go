package grpclimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// benchKeys is how many clients the benchmarks spread their calls over.
const benchKeys = 1000

// benchOptions limits EmptyCall per client IP and per principal, with
// limits no benchmark reaches, on an in-memory store.
func benchOptions(b *testing.B) grpclimit.Options {
	ms := memstore.New(memstore.Options{})
	b.Cleanup(func() { ms.Close() })
	lim, err := floodgate.New(ms, floodgate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	bucket := func(name string) floodgate.Rule {
		r, err := floodgate.NewRule(name, 1<<40, time.Minute, floodgate.TokenBucket)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	en, err := enforce.New(enforce.Options{Limiter: lim})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { en.Close() })
	return grpclimit.Options{Enforcer: en, Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{
			{Rule: bucket("ip"), Key: grpclimit.ClientIP(nil)},
			{Rule: bucket("user"), Key: grpclimit.Principal},
		}},
	}}
}

// The interceptor alone: keys, one all-or-nothing decision of two hits,
// the metadata and the status, without the network.
func BenchmarkUnaryInterceptor(b *testing.B) {
	gl, err := grpclimit.New(benchOptions(b))
	if err != nil {
		b.Fatal(err)
	}
	icpt := gl.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctxs := make([]context.Context, benchKeys)
	for i := range ctxs {
		ctx := grpc.NewContextWithServerTransportStream(call(tcp("203.0.113."+strconv.Itoa(i%250)+":1")), nopStream{})
		ctxs[i] = grpclimit.WithPrincipal(ctx, "user-"+strconv.Itoa(i))
	}
	if got := len(ctxs); got != benchKeys {
		b.Fatalf("%d keys, want %d", got, benchKeys)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := icpt(ctxs[i%benchKeys], nil, info, handler); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// A unary call over loopback, with and without the interceptor: what the
// limit adds to a real call.
func BenchmarkLoopback(b *testing.B) {
	for _, limited := range []bool{false, true} {
		b.Run(map[bool]string{false: "none", true: "limited"}[limited], func(b *testing.B) {
			var opts []grpc.ServerOption
			if limited {
				gl, err := grpclimit.New(benchOptions(b))
				if err != nil {
					b.Fatal(err)
				}
				opts = serverOptions(gl)
			}
			c, _ := start(b, opts...)
			ctxs := make([]context.Context, benchKeys)
			for i := range ctxs {
				ctxs[i] = withMD(userKey, "user-"+strconv.Itoa(i))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := c.EmptyCall(ctxs[i%benchKeys], new(testpb.Empty)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// nopStream is the server transport stream of a benchmark's call: it
// takes the headers and sends nothing.
type nopStream struct{}

func (nopStream) Method() string               { return emptyCall }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }
