package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// benchKeys is the number of distinct keys the benchmarks spread over.
const benchKeys = 10_000

func benchmarkTake(b *testing.B, parallel bool) {
	for _, alg := range algorithms {
		b.Run(alg.String(), func(b *testing.B) {
			s := newStore(b)
			r := mustRule(b, "bench", 100, time.Minute, alg)
			keys := make([]string, benchKeys)
			for i := range keys {
				keys[i] = "user-" + strconv.Itoa(i)
			}
			if len(keys) != benchKeys {
				b.Fatalf("%d keys, want %d", len(keys), benchKeys)
			}
			var seq atomic.Uint64
			take := func(ctx context.Context) {
				n := seq.Add(1)
				hit := []floodgate.Hit{{Rule: r, Key: keys[n%benchKeys], Cost: 1}}
				if _, err := s.Take(ctx, hit); err != nil {
					b.Fatal(err)
				}
			}
			// A deadline, as a floodgate.Limiter always sets one.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			if parallel {
				// Many requests in flight per core, as in a busy server.
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						take(ctx)
					}
				})
			} else {
				for b.Loop() {
					take(ctx)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkTake measures one Take at a time: the round trip bounds it.
func BenchmarkTake(b *testing.B) { benchmarkTake(b, false) }

// BenchmarkTakeParallel measures 16 concurrent Takes per core, which the
// group commit (batch.go) sends together, a few script calls in flight.
func BenchmarkTakeParallel(b *testing.B) { benchmarkTake(b, true) }

// BenchmarkTakeFullLog measures the exact sliding window on keys held at
// their limit: 64 keys of limit 1,000 per 2s, taken concurrently at about
// the rate that keeps each log full (a mix of admissions and denials), so
// each take works on a log of about 1,000 requests.
func BenchmarkTakeFullLog(b *testing.B) {
	s := newStore(b)
	r := mustRule(b, "full", 1000, 2*time.Second, floodgate.SlidingWindow)
	const keys = 64
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for k := range keys { // fill every log first
		for range 1000 {
			if _, err := s.Take(ctx, []floodgate.Hit{{Rule: r, Key: "k" + strconv.Itoa(k), Cost: 1}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var seq, allowed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			res, err := s.Take(ctx, []floodgate.Hit{{Rule: r, Key: "k" + strconv.Itoa(int(n%keys)), Cost: 1}})
			if err != nil {
				b.Fatal(err)
			}
			if res[0].Allowed {
				allowed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}
