package enforce_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
)

// Callers that refund their results any number of times, concurrently
// (a handler's retry and a deferred cleanup), by policy or whole, never
// give back more than their requests took: a memstore takes no ids, so
// its refunds are told apart by their stamps alone. Whatever the
// interleaving, at the end each key's count is exactly the admitted
// requests that nobody refunded, on the store's limiter (a memstore:
// the LocalStore path) and on the local fallback (the store failing).
func TestConcurrentRepeatedRefundsCreditOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local bool // the store fails: the local limits decide
	}{{"store", false}, {"local fallback", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New(memstore.Options{})
			t.Cleanup(func() { ms.Close() })
			var store floodgate.Store = ms
			if tc.local {
				fault := faultstore.New(ms)
				fault.Set(faultstore.Fail)
				store = fault
			}
			lim, err := floodgate.New(store, floodgate.Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			e, err := enforce.New(enforce.Options{Limiter: lim})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			const limit = 10
			// A fixed window of a year (no boundary falls within the test,
			// but once a year): a refund there lowers a count, where a
			// second one would show.
			a := floodgate.Rule{Name: "race-a", Limit: limit, Window: 365 * 24 * time.Hour, Algorithm: floodgate.FixedWindow}
			b := floodgate.Rule{Name: "race-b", Limit: limit, Window: time.Hour, Algorithm: floodgate.TokenBucket}
			g, err := e.Gate(enforce.Spec{Name: "race", Limits: []enforce.Limit{{Rule: a}, {Rule: b}}})
			if err != nil {
				t.Fatal(err)
			}
			want := enforce.Local
			if !tc.local {
				want = enforce.Allowed
			}
			var kept atomic.Int64 // admitted and not refunded by race-a
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for range 300 {
						res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k", "k"}))
						if err != nil {
							t.Error(err)
							return
						}
						if !res.Allowed() {
							continue
						}
						if res.Outcome != want {
							t.Errorf("outcome %v, want %v", res.Outcome, want)
							return
						}
						refundA := false
						var inner sync.WaitGroup
						for range rng.IntN(4) { // 0 to 3 refunds, concurrent
							var policies []string
							switch rng.IntN(3) {
							case 0:
								refundA = true
							case 1:
								policies, refundA = []string{"race-a"}, true
							case 2:
								policies = []string{"race-b"}
							}
							inner.Go(func() {
								if err := res.Refund(t.Context(), policies...); err != nil {
									t.Error(err)
								}
							})
						}
						inner.Wait()
						if !refundA {
							kept.Add(1)
						}
					}
				})
			}
			wg.Wait()
			// What race-a counted shows in what it admits now (the local
			// limits keep the Enforcer's own memstore, out of reach). Its
			// window counts exactly; race-b's token bucket refills with time.
			admitted := int64(0)
			for range limit + 1 {
				res, err := g.Check(t.Context(), []enforce.Hit{{Hit: floodgate.Hit{Rule: a, Key: "k"}}})
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed() {
					admitted++
				}
			}
			if k := kept.Load(); admitted != limit-k || k > limit {
				t.Errorf("race-a admits %d more after %d kept; want %d: a refund credited more, or less, than its take", admitted, k, limit-k)
			}
		})
	}
}
