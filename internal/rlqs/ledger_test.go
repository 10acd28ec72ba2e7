package rlqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		demands  []int64
		want     int64
	}{
		{1000, []int64{600, 50, 50, 50, 50, 50, 50, 50, 50, 50}, 550},
		{1000, []int64{100, 200}, 1000},
		{1000, []int64{1000, 1000, 1000, 1000}, 250},
		{10, []int64{1, 100, 100}, 4},
		{0, []int64{5}, 0},
	} {
		if got := fairShare(tc.capacity, tc.demands); got != tc.want {
			t.Errorf("fairShare(%d, %v) = %d, want %d", tc.capacity, tc.demands, got, tc.want)
		}
	}
}

// TestMemLedgerSteps walks one bucket through a share moving from one
// holder to another: the lowered share keeps counting until its TTL, and
// the raised one takes only what is free.
func TestMemLedgerSteps(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := NewMemLedger(clk.now)
	ctx := context.Background()
	const ttl = 2 * time.Second
	req := func(h string, demand, keep int64) GrantRequest {
		return GrantRequest{Bucket: "b", Holder: h, Capacity: 1000, Demand: demand, Keep: keep, TTL: ttl}
	}
	steps := []struct {
		advance  time.Duration
		req      GrantRequest
		want     Grant
		wantHeld int64
	}{
		{0, req("a", 1000, 0), Grant{1000, 1000}, 1000},                         // alone: everything
		{500 * time.Millisecond, req("b", 1000, 0), Grant{0, 500}, 1000},        // fair 500, nothing free yet
		{0, req("a", 1000, 1000), Grant{500, 500}, 1000},                        // a lowers; its 1000 still counts
		{0, req("b", 1000, 0), Grant{0, 500}, 1000},                             // so b still gets nothing
		{1600 * time.Millisecond, req("b", 1000, 0), Grant{500, 500}, 1000},     // a's 1000 expired (2.1s): b gets 500
		{0, req("a", 100, 500), Grant{100, 100}, 1000},                          // a needs 100 now; its 500 counts
		{0, req("b", 1000, 500), Grant{500, 900}, 1000},                         // fair 900, a's 500 still holds
		{2100 * time.Millisecond, req("b", 1000, 500), Grant{1000, 1000}, 1000}, // a silent 2.1s: its grants and demand expired, b alone
	}
	for i, st := range steps {
		clk.add(st.advance)
		g, err := l.Grant(ctx, st.req)
		if err != nil {
			t.Fatal(err)
		}
		if g != st.want {
			t.Errorf("step %d: %s got %+v, want %+v", i, st.req.Holder, g, st.want)
		}
		if h := l.Held("b"); h != st.wantHeld {
			t.Errorf("step %d: held %d, want %d", i, h, st.wantHeld)
		}
	}
}

// interval is one grant as the oracle sees it: in force from the call's
// return until its start plus the TTL.
type interval struct {
	holder   int
	from, to time.Time
	share    int64
}

// overAt returns the worst sum of shares in force at any instant, each
// holder counted at the largest of its live grants.
func worstSum(ivs []interval) (int64, time.Time) {
	var worst int64
	var at time.Time
	for _, p := range ivs {
		t := p.from
		held := map[int]int64{}
		for _, q := range ivs {
			if !q.from.After(t) && q.to.After(t) && q.share > held[q.holder] {
				held[q.holder] = q.share
			}
		}
		var sum int64
		for _, s := range held {
			sum += s
		}
		if sum > worst {
			worst, at = sum, t
		}
	}
	return worst, at
}

// hammer runs holders that claim random demands concurrently through
// the ledgers (round robin: several replicas) and returns every grant.
func hammer(t *testing.T, ledgers []Ledger, bucket string, capacity int64, ttl time.Duration, holders int, d time.Duration) []interval {
	var mu sync.Mutex
	var ivs []interval
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(h), 7))
			l := ledgers[h%len(ledgers)]
			var keep int64
			for time.Now().Before(end) {
				demand := r.Int64N(capacity)
				switch r.IntN(6) {
				case 0:
					demand = 0
				case 1:
					demand = -1 // not measured yet
				}
				start := time.Now()
				g, err := l.Grant(context.Background(), GrantRequest{Bucket: bucket, Holder: fmt.Sprint("h", h), Capacity: capacity,
					Demand: demand, Keep: keep, Hysteresis: 5, TTL: ttl})
				if err != nil {
					t.Error(err)
					return
				}
				keep = g.Share
				if g.Share > 0 {
					mu.Lock()
					ivs = append(ivs, interval{h, time.Now(), start.Add(ttl), g.Share})
					mu.Unlock()
				}
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].from.Before(ivs[j].from) })
	return ivs
}

// TestLedgerInvariant checks the package doc's invariant against memory
// and a real redis-server shared by three ledgers (three replicas): at
// no instant do the grants that can be in force sum past the capacity.
func TestLedgerInvariant(t *testing.T) {
	const capacity, ttl = 1000, 150 * time.Millisecond
	run := func(t *testing.T, ls []Ledger) {
		ivs := hammer(t, ls, fmt.Sprint("inv-", rand.Int64()), capacity, ttl, 8, 1500*time.Millisecond)
		if len(ivs) < 100 {
			t.Fatalf("only %d grants: the test exercised nothing", len(ivs))
		}
		worst, at := worstSum(ivs)
		if worst > capacity {
			t.Errorf("a Ledger must never let grants in force sum past the capacity: %d of %d at %v", worst, capacity, at)
		}
		var total int64
		for _, iv := range ivs {
			total += iv.share
		}
		t.Logf("%d grants, worst instant %d of %d", len(ivs), worst, capacity)
	}
	t.Run("memory", func(t *testing.T) { run(t, []Ledger{NewMemLedger(nil)}) })
	t.Run("redis", func(t *testing.T) {
		addr := redistest.Addr(t)
		var ls []Ledger
		for range 3 {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			ls = append(ls, NewRedisLedger(c, "rlqstest:"))
		}
		run(t, ls)
	})
}

// TestRedisLedgerMatchesMemory runs the step table of
// TestMemLedgerSteps' first steps against Redis: grant.lua computes what
// ledger.go computes.
func TestRedisLedgerMatchesMemory(t *testing.T) {
	addr := redistest.Addr(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rl := NewRedisLedger(c, "rlqstest:")
	ml := NewMemLedger(nil)
	bucket := fmt.Sprint("same-", rand.Int64())
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	keep := map[string]int64{}
	for i := range 300 {
		h := fmt.Sprint("h", r.IntN(5))
		req := GrantRequest{Bucket: bucket, Holder: h, Capacity: 997, Demand: r.Int64N(600), Keep: keep[h], Hysteresis: 3, TTL: time.Hour}
		switch r.IntN(6) {
		case 0:
			req.Demand = 0
		case 1:
			req.Demand = -1
		}
		g1, err1 := ml.Grant(ctx, req)
		g2, err2 := rl.Grant(ctx, req)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if g1 != g2 {
			t.Fatalf("call %d (%+v): memory %+v, redis %+v", i, req, g1, g2)
		}
		keep[h] = g1.Share
	}
}
