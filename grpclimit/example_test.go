package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A gRPC server whose health checks are limited to 2 per minute per client
// address. The limiter runs on an in-memory store here; a Redis store
// (redisstore) shares the limits among replicas.
func Example() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		log.Fatal(err)
	}
	e, err := enforce.New(enforce.Options{Limiter: limiter}) // and Registerer, Logger for metrics and logs
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	gl, err := grpclimit.New(grpclimit.Options{
		Enforcer: e,
		Methods: map[string]grpclimit.Method{
			healthpb.Health_Check_FullMethodName: {Limits: []grpclimit.Limit{
				{Rule: floodgate.Rule{Name: "ip", Limit: 2, Window: time.Minute}, Key: grpclimit.ClientIP(nil)},
			}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(gl.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Println(st.Code(), md.Get(grpclimit.MetadataRateLimit))
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry after", d.GetRetryDelay().AsDuration().Round(time.Minute))
			case *errdetails.QuotaFailure:
				fmt.Println("violated", d.GetViolations()[0].GetSubject())
			}
		}
	}
	// Output:
	// OK ["ip";r=1;t=60]
	// OK ["ip";r=0;t=60]
	// ResourceExhausted ["ip";r=0;t=60]
	// retry after 1m0s
	// violated ip
}
