package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkCluster measures decisions per second on a Redis Cluster of 3
// masters and 3 replicas, with 16 concurrent checks per core spread over
// 10,000 keys (sliding window, limit 100 per minute, so almost every
// decision is allowed): one key per check, and two keys in two slots per
// check (the cross-slot path: two scripts one after the other). It
// reports decisions/s and decisions/s per master; on one machine the
// client, not Redis, is often the bottleneck, so the per-master figure is
// a floor.
func BenchmarkCluster(b *testing.B) {
	cluster := redistest.StartCluster(b, 3, 1)
	const masters = 3
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name  string
		hits  func(n uint64, s *Store) []floodgate.Hit
		slots int
	}{
		{"one-key", func(n uint64, _ *Store) []floodgate.Hit {
			return []floodgate.Hit{{Rule: benchRule, Key: keys[n%benchKeys], Cost: 1}}
		}, 1},
		{"two-slots", func(n uint64, _ *Store) []floodgate.Hit {
			return []floodgate.Hit{{Rule: benchRule, Key: keys[n%benchKeys], Cost: 1}, {Rule: benchRule2, Key: keys[(n+1)%benchKeys], Cost: 1}}
		}, 2},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := newStoreURL(b, cluster.URL())
			if tc.slots == 2 {
				h := tc.hits(0, s)
				if keySlot(s.tag(h[0].Rule.Name, h[0].Key)) == keySlot(s.tag(h[1].Rule.Name, h[1].Key)) {
					b.Fatal("the two keys share a slot")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			var seq atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					if _, err := s.Take(ctx, tc.hits(n, s)); err != nil {
						b.Fatal(err)
					}
				}
			})
			perSec := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(perSec, "decisions/s")
			b.ReportMetric(perSec/masters, "decisions/s/master")
		})
	}
}

var (
	benchRule  = floodgate.Rule{Name: "bench", Limit: 100, Window: time.Minute, Algorithm: floodgate.SlidingWindow}
	benchRule2 = floodgate.Rule{Name: "bench2", Limit: 100, Window: time.Minute, Algorithm: floodgate.SlidingWindow}
)
