package main

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
)

// These benchmarks run the table's limiters under `go test -bench`, for
// benchstat and profiles: BenchmarkPeers/<store>/<workload>/<limiter>.
// Redis peers need FLOODGATE_REDIS_ADDR (scripts/bench.sh sets it).

func BenchmarkPeers(b *testing.B) {
	addr := os.Getenv("FLOODGATE_REDIS_ADDR")
	for _, p := range peers {
		store := "memory"
		if p.redis {
			store = "redis"
		}
		for _, w := range workloads {
			b.Run(store+"/"+w.name+"/"+p.name, func(b *testing.B) {
				if p.redis && addr == "" {
					b.Skip("FLOODGATE_REDIS_ADDR is not set")
				}
				prefix := newPrefix()
				l, err := p.build(addr, prefix)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				keys, hot := keySet(prefix)
				var next atomic.Uint64
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					off := next.Add(1) * 1237
					var i, n uint64
					for pb.Next() {
						h := w.hot(i)
						key := hot
						if !h {
							key = keys[(off+n*stride)%numKeys]
							n++
						}
						if _, err := l.Allow(ctx, key, h); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
