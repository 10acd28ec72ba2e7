package overrides_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
)

// A fixed set of overrides on a memstore: the enterprise customer gets 5
// requests a minute where everyone else gets 2.
func ExampleSet() {
	api := floodgate.Rule{Name: "api", Limit: 2, Window: time.Minute}
	vip, err := overrides.NewSet(overrides.Entry{Rule: floodgate.Rule{Name: "api", Limit: 5, Window: time.Minute}, Key: "enterprise-1"})
	if err != nil {
		panic(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{Overrides: vip})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, key := range []string{"free-9", "enterprise-1"} {
		admitted := 0
		for range 10 {
			if d, err := limiter.Allow(ctx, api, key); err == nil && d.Allowed {
				admitted++
			}
		}
		fmt.Printf("%s: %d of 10 admitted\n", key, admitted)
	}
	// Output:
	// free-9: 2 of 10 admitted
	// enterprise-1: 5 of 10 admitted
}

// A service follows the overrides that operators set in Redis: every
// replica applies a change within its refresh interval.
func ExampleNew() {
	ctx := context.Background()
	table, err := overrides.New(ctx, overrides.Options{URL: "redis://127.0.0.1:6379/0", Refresh: 5 * time.Second})
	if err != nil {
		panic(err) // only bad options fail
	}
	defer table.Close()
	store := memstore.New(memstore.Options{}) // redisstore in production
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{Overrides: table})
	if err != nil {
		panic(err)
	}
	_ = limiter
}
