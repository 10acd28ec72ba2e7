package breakerstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// BenchmarkTake measures what the breaker adds to a take: memstore
// alone, and behind a closed breaker, one hit of 1,000 keys per call.
func BenchmarkTake(b *testing.B) {
	rule := floodgate.Rule{Name: "b", Limit: 1_000_000, Window: time.Minute}
	hits := make([][]floodgate.Hit, 1000)
	for i := range hits {
		hits[i] = []floodgate.Hit{{Rule: rule, Key: "k" + strconv.Itoa(i), Cost: 1}}
	}
	for _, breaker := range []bool{false, true} {
		b.Run(map[bool]string{false: "memstore", true: "breaker"}[breaker], func(b *testing.B) {
			ms := memstore.New(memstore.Options{})
			defer ms.Close()
			var st floodgate.Store = ms
			if breaker {
				bs, err := breakerstore.New(ms, breakerstore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				st = bs
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				res, err := st.Take(ctx, hits[i%len(hits)])
				if err != nil || len(res) != 1 {
					b.Fatal(res, err)
				}
				i++
			}
		})
	}
}
