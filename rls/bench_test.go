package rls_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// BenchmarkShouldRateLimit measures decisions through the generated gRPC
// client on loopback, as Envoy calls, with clients in parallel: on
// memstore (the service's own cost) and on Redis, per algorithm, each
// call on one of 10,000 descriptor values. docs/SERVICE.md quotes a run.
func BenchmarkShouldRateLimit(b *testing.B) {
	const values = 10_000
	for _, store := range []string{"memory", "redis"} {
		for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
			b.Run(store+"/"+alg, func(b *testing.B) {
				var st floodgate.Store = memstore.New(memstore.Options{})
				if store == "redis" {
					st = freshRedis(b)
				}
				yaml := "domain: bench\ndescriptors:\n  - key: user\n    algorithm: " + alg +
					"\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
				svc := start(b, setup{yaml: yaml, store: st})
				reqs := make([]*rlsv3.RateLimitRequest, values)
				for i := range reqs {
					reqs[i] = req("bench", desc("user=u"+strconv.Itoa(i)))
				}
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := svc.client.ShouldRateLimit(context.Background(), reqs[n.Add(1)%values])
						if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
							b.Errorf("%v, %v", resp, err)
							return
						}
					}
				})
				if b.N >= values && n.Load() < values {
					b.Fatalf("%d calls cover fewer than the %d values claimed", n.Load(), values)
				}
			})
		}
	}
}
