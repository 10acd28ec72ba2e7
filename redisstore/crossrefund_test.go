package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestRefundAcrossStoresCreditsNothing: a Decision refunded on a Limiter
// of another store (memstore's, whose takes have no id and a Stamp.Take,
// on Redis; Redis's, whose takes have an id and no Stamp.Take, on
// memstore) credits nothing there; each refunded on its own store still
// credits its take.
func TestRefundAcrossStoresCreditsNothing(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			ms := memstore.New(memstore.Options{})
			defer ms.Close()
			r := mustRule(t, "across", 1, time.Hour, alg)
			var ls [2]*floodgate.Limiter // memstore, redisstore
			for i, s := range []floodgate.Store{ms, newStore(t)} {
				l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				ls[i] = l
			}
			allow := func(i int) floodgate.Decision {
				t.Helper()
				d, err := ls[i].Allow(ctx(t), r, "k")
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			refund := func(i int, d floodgate.Decision) {
				t.Helper()
				if err := ls[i].Refund(ctx(t), d); err != nil {
					t.Fatal(err)
				}
			}
			var own [2]floodgate.Decision
			for i := range ls {
				if own[i] = allow(i); !own[i].Allowed {
					t.Fatalf("store %d: first take denied", i)
				}
			}
			refund(1, own[0]) // memstore's on Redis
			refund(0, own[1]) // Redis's on memstore
			for i, name := range []string{"memstore", "redisstore"} {
				if d := allow(i); d.Allowed {
					t.Errorf("%s: allowed after the other store's decision was refunded on it; want denied (limit 1, its own take held)", name)
				}
				refund(i, own[i])
				if d := allow(i); !d.Allowed {
					t.Errorf("%s: denied after its own decision was refunded; want allowed", name)
				}
			}
		})
	}
}
