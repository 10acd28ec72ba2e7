package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRefundNeverFreesMoreThanItsTake drives a ring through takes on a
// clock that steps back as often as forward (each recorded at the ring's
// newest time when the clock is behind it) and refunds in random order,
// against the ring the refunded takes would have left had they never
// happened: after every refund the ring holds exactly as many times, and
// never fewer after any instant (so it never admits sooner), although a
// refund's own times may be later than its stamp.
func TestRefundNeverFreesMoreThanItsTake(t *testing.T) {
	const window, limit = int64(1) << 50, 1 << 20 // nothing leaves, nothing wraps
	type take struct{ at, t, cost int64 }
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		e := &entry{}
		var takes []take
		var live []int // takes not refunded
		now := int64(1_000)
		for range 60 {
			now += rng.Int64N(7) - 3 // back as often as forward
			if len(live) == 0 || rng.IntN(3) != 0 {
				cost := 1 + rng.Int64N(3)
				t := now
				if n := int64(len(e.ring)); n > 0 {
					t = max(t, e.at(n-1))
				}
				e.add(now, now, cost, limit, window)
				takes = append(takes, take{now, t, cost})
				live = append(live, len(takes)-1)
				continue
			}
			j := rng.IntN(len(live))
			tk := takes[live[j]]
			live = slices.Delete(live, j, j+1)
			e.remove(tk.at, tk.cost)
			var want []int64 // the times of the takes never refunded
			for _, i := range live {
				for range takes[i].cost {
					want = append(want, takes[i].t)
				}
			}
			slices.Sort(want)
			got := make([]int64, len(e.ring))
			for i := range got {
				got[i] = e.at(int64(i))
			}
			if !slices.IsSorted(got) {
				t.Fatalf("seed %d: ring %v out of order", seed, got)
			}
			if len(got) != len(want) {
				t.Fatalf("seed %d: ring %v after the refund of %+v, want %d times as %v", seed, got, tk, len(want), want)
			}
			for i := range got {
				if got[i] < want[i] {
					t.Fatalf("seed %d: ring %v after the refund of %+v frees more than the takes refunded: %v", seed, got, tk, want)
				}
			}
		}
	}
}
