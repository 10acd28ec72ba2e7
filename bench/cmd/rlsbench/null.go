package main

import (
	"context"
	"flag"
	"net"
	"os/signal"
	"syscall"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// nullServer answers OK to every descriptor, with no store: the ceiling
// that gRPC and the load generator allow on this machine.
type nullServer struct {
	pb.UnimplementedRateLimitServiceServer
}

func (nullServer) ShouldRateLimit(_ context.Context, r *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, len(r.GetDescriptors()))
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	return resp, nil
}

// serveNull runs the null server on -addr until SIGTERM or SIGINT.
func serveNull(args []string) error {
	fs := flag.NewFlagSet("null", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, nullServer{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	return gs.Serve(ln)
}
