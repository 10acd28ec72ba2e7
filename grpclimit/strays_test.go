package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A server with an unknown-service handler is called by any method name a
// client sends (100,000 distinct 1 KiB names, each kept for a near-miss
// check, would grow the heap by 120 MiB). The names
// remembered stop at the bound, a name past it is still limited by
// Default, the metrics hold no method name, and a near miss past the
// bound is still logged, once.
func TestStrayNamesBounded(t *testing.T) {
	e := newEnv(t, envOptions{})
	const calls = grpclimit.MaxStrays + 300
	gl, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf,
		Methods: map[string]grpclimit.Method{emptyCall: {}},
		Default: grpclimit.Method{Limits: []grpclimit.Limit{{Rule: rule(t, "strays", calls+10, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(gl.StreamServerInterceptor()),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error { return status.Error(codes.Unimplemented, "stray") }))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })

	call := func(name string) {
		t.Helper()
		err := conn.Invoke(context.Background(), name, new(emptypb.Empty), new(emptypb.Empty))
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("call of %.40s…: %v; want the handler's Unimplemented (Default allows it)", name, err)
		}
	}
	pad := strings.Repeat("x", 200)
	call("/stray.S/first" + pad)
	series := countSeries(t, e.reg)
	for i := 1; i < calls; i++ {
		call(fmt.Sprintf("/stray.S/m%05d%s", i, pad))
	}
	long := "/stray.S/" + strings.Repeat("L", grpclimit.MaxStrayLen)
	call(long) // too long to remember, even below the bound
	nearMiss := strings.ToUpper(emptyCall)
	call(nearMiss)
	call(nearMiss)

	if n := gl.Strays(); n != grpclimit.MaxStrays {
		t.Fatalf("%d stray names remembered after %d distinct ones; want the bound, %d", n, calls+2, grpclimit.MaxStrays)
	}
	if got, want := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"gate": grpclimit.DefaultGate}), float64(calls+3); got != want {
		t.Fatalf("Default decided %v calls; want %v: a name past the bound is limited as any other", got, want)
	}
	if n := countSeries(t, e.reg); n != series {
		t.Fatalf("%d metric series after %d distinct names, %d after one: a method name became a label", n, calls+2, series)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "are past the bound of the names remembered"); n != 1 {
		t.Fatalf("the bound was logged %d times; want once:\n%.2000s", n, logs)
	}
	if n := strings.Count(logs, "called="+nearMiss); n != 1 || !strings.Contains(logs, "the first near miss past the bound") {
		t.Fatalf("the near miss past the bound was logged %d times; want once:\n%.2000s", n, logs)
	}
	if strings.Contains(logs, "m00001") {
		t.Fatalf("a stray name that is no near miss was logged:\n%.2000s", logs)
	}
}

// countSeries returns how many metric series reg holds, and fails t if a
// label holds a stray method name.
func countSeries(t testing.TB, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			n++
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), "stray.S") {
					t.Fatalf("metric %s has label %s=%q", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	return n
}
