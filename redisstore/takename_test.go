package redisstore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestTakeNames: a store's names count on from their start, skip zero
// (the name of no take) when they wrap, and never repeat under
// concurrency; two seeded stores start apart.
func TestTakeNames(t *testing.T) {
	var n takeNames
	n.last.Store(1<<64 - 3)
	var got []uint64
	for range 4 {
		got = append(got, n.next())
	}
	if want := []uint64{1<<64 - 2, 1<<64 - 1, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("names after 2^64-3: %v, want %v (zero skipped)", got, want)
	}

	var a, b takeNames
	a.seed()
	b.seed()
	if a.last.Load() == b.last.Load() {
		t.Fatalf("two seeded stores start at the same name %d", a.last.Load())
	}

	seen := make(map[uint64]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			local := make([]uint64, 0, 1000)
			for range 1000 {
				local = append(local, a.next())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, t0 := range local {
				if seen[t0] {
					t.Errorf("name %d given twice", t0)
				}
				seen[t0] = true
			}
		})
	}
	wg.Wait()
	if len(seen) != 8000 {
		t.Fatalf("%d names for 8000 takes", len(seen))
	}

	for _, tc := range []struct {
		t    uint64
		want string
	}{{1, "1"}, {35, "z"}, {36, "10"}, {1<<64 - 1, "3w5e11264sgsf"}} {
		if got := takeID(tc.t); got != tc.want {
			t.Errorf("takeID(%d) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

// TestCrossSlotTakeHasOneName: a check across slots is one take: every
// hit it recorded carries the same name, and the roll-back of a denied one
// refunds the slots taken under the take's own name (the tombstones that
// make it idempotent).
func TestCrossSlotTakeHasOneName(t *testing.T) {
	s, f, _ := faultStore(t)
	ra, rb := mustRule(t, "ip", 5, time.Hour, floodgate.FixedWindow), mustRule(t, "account", 2, time.Hour, floodgate.FixedWindow)
	a, b := twoSlots(t, s, ra, rb)
	res, err := s.Take(ctx(t), []floodgate.Hit{a, b})
	if err != nil || !res[0].Allowed || !res[1].Allowed {
		t.Fatalf("take: %+v, %v; want both allowed", res, err)
	}
	if res[0].Stamp.Take == 0 || res[0].Stamp.Take != res[1].Stamp.Take {
		t.Fatalf("a check across two slots named %d and %d; want one name, not zero", res[0].Stamp.Take, res[1].Stamp.Take)
	}
	if _, err := s.Take(ctx(t), []floodgate.Hit{b}); err != nil { // b is full
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tombs []string
	f.set(func(script Script, keys []string) error {
		if isRefund(script) {
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(keys); i += 2 {
				tombs = append(tombs, keys[i])
			}
		}
		return nil
	}, nil)
	res, err = s.Take(ctx(t), []floodgate.Hit{a, b})
	if err != nil || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("take: %+v, %v; want a within its limit, b denied", res, err)
	}
	name := s.names.last.Load() // the denied take's
	want := []string{s.tag(ra.Name, a.Key) + "r:" + stateSuffix(ra) + ":" + takeID(name)}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(tombs, want) {
		t.Fatalf("the roll-back refunded under tombstones %q; want the denied take's own, %q", tombs, want)
	}
	if p, err := s.Peek(ctx(t), []floodgate.Hit{a}); err != nil || p[0].Remaining != 3 {
		t.Fatalf("a after the roll-back: %+v, %v; want Remaining 3 after a peek (the first take's 1 held, the denied take's credited)", p, err)
	}
}
