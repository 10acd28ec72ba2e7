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

// BenchmarkServer measures the service's own path, without gRPC: a
// direct call of ShouldRateLimit on memstore, one descriptor of 10,000
// values per request, or three (three limits); allocs/op are the
// service's and the core's, the figure its changes are judged by.
func BenchmarkServer(b *testing.B) {
	const values = 10_000
	yaml := "domain: bench\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n" +
		"  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n" +
		"  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n"
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"-descriptors", func(b *testing.B) {
			svc := start(b, setup{yaml: yaml, store: memstore.New(memstore.Options{})})
			reqs := make([]*rlsv3.RateLimitRequest, values)
			for i := range reqs {
				ds := []string{"user=u" + strconv.Itoa(i), "ip=192.0.2." + strconv.Itoa(i%256) + "/" + strconv.Itoa(i), "tenant=t" + strconv.Itoa(i)}
				r := req("bench")
				for _, d := range ds[:n] {
					r.Descriptors = append(r.Descriptors, desc(d))
				}
				reqs[i] = r
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := svc.srv.ShouldRateLimit(ctx, reqs[i%values])
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
					b.Fatalf("%v, %v", resp, err)
				}
				i++
			}
			if b.N >= values && i < values {
				b.Fatalf("%d calls cover fewer than the %d values claimed", i, values)
			}
		})
	}
}
