package rls_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/rls"
)

// TestShutdownEndsHealthWatches: a client watching the gRPC health
// service (client-side health checking) sees NOT_SERVING on Shutdown and
// then the end of its stream, so that the server's GracefulStop is not
// held until its deadline by a stream that never ends.
func TestShutdownEndsHealthWatches(t *testing.T) {
	enf := memEnforcer(t)
	srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: configDir(t, map[string]string{"a.yaml": "domain: a\n"})})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	g := grpc.NewServer(srv.GRPCServerOptions()...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound on every wait, so that a stream that never ends fails the
	// test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var watches []healthpb.Health_WatchClient
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watch %q: %v, %v; want SERVING", name, m, err)
		}
		watches = append(watches, w)
	}

	srv.Close()
	for i, w := range watches {
		m, err := w.Recv()
		if err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("watch %d after Close: %v, %v; want NOT_SERVING", i, m, err)
		}
		if m, err := w.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("watch %d after NOT_SERVING: %v, %v; want the stream's end", i, m, err)
		}
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waits 5s after Shutdown")
	}
}
