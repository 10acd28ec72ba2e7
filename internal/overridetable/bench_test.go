package overridetable_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkList measures one full load of a table at the bound, 10,000
// overrides of the size the command writes, as every replica does at
// least once a minute: the round trip, Redis's work and the parsing.
func BenchmarkList(b *testing.B) {
	addr := redistest.Addr(b)
	p := fmt.Sprintf("ovt-bench-%d:", b.N)
	tb, err := overridetable.New(overridetable.Options{URL: "redis://" + addr, Prefix: p})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	fill := []string{"HSET", tb.Key()}
	for i := range overridetable.MaxEntries {
		fill = append(fill, fmt.Sprintf("api:customer-%07d", i), "limit=1000/1m0s,algorithm=sliding-window,expires=2030-01-01T00:00:00Z")
	}
	if _, err := redistest.Command(addr, fill...); err != nil {
		b.Fatal(err)
	}
	defer redistest.Command(addr, "DEL", tb.Key())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := tb.List(ctx)
		if err != nil || len(l.Entries) != overridetable.MaxEntries {
			b.Fatalf("List: %v", err)
		}
	}
}
