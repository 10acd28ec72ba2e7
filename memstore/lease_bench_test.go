package memstore_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// BenchmarkLease measures, on one memstore, 64 goroutines spread over
// 10,000 keys: "rate" is one rate decision (Allow, a token bucket, always
// allowed), "acquire+release" a lease taken and released (Allow of a
// concurrency limit of 64, never denied, then Refund). Each reports its
// operations per second.
func BenchmarkLease(b *testing.B) {
	rate := floodgate.Rule{Name: "rate", Limit: 1_000_000_000, Window: time.Second, Algorithm: floodgate.TokenBucket}
	inflight := floodgate.Rule{Name: "inflight", Limit: 64, Window: time.Minute, Algorithm: floodgate.Concurrency}
	for _, bc := range []struct {
		name  string
		lease bool
	}{{"rate", false}, {"acquire+release", true}} {
		b.Run(bc.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			l, err := floodgate.New(s, floodgate.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ks := keys(b)
			var seq atomic.Uint64
			ctx := context.Background()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 goroutines
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(1) * 7919
				for pb.Next() {
					i += 7919
					r := rate
					if bc.lease {
						r = inflight
					}
					d, err := l.Allow(ctx, r, ks[i%benchKeys])
					if err != nil || !d.Allowed {
						b.Errorf("%+v, %v", d, err)
						return
					}
					if bc.lease {
						if err := l.Refund(ctx, d); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
