package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

// gateClient holds every take script call at a gate until the test opens
// it, and records how many keys each call carried, so that tests can line
// up Takes behind calls in flight deterministically.
type gateClient struct {
	rueidis.Client
	mu    sync.Mutex
	calls []int         // guarded by mu; keys of each take script call, in order
	held  int           // guarded by mu; calls waiting at the gate
	gate  chan struct{} // closed to let calls through
	fail  error         // guarded by mu; when set, calls fail with it instead of running
}

// newGateClient loads the take script first, so that no call takes the
// NOSCRIPT detour (EVALSHA, then EVAL) that would count twice.
func newGateClient(t *testing.T) *gateClient {
	c := rawClient(t)
	if err := c.Do(ctx(t), c.B().ScriptLoad().Script(takeLua).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return &gateClient{Client: c, gate: make(chan struct{})}
}

func (g *gateClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if args[0] != "EVALSHA" && args[0] != "EVAL" {
		return g.Client.Do(ctx, cmd)
	}
	n, _ := strconv.Atoi(args[2])
	g.mu.Lock()
	g.calls = append(g.calls, n)
	g.held++
	g.mu.Unlock()
	<-g.gate
	g.mu.Lock()
	g.held--
	fail := g.fail
	g.mu.Unlock()
	if fail != nil {
		return rueidis.NewErrorResult(fail)
	}
	return g.Client.Do(ctx, cmd)
}

// waitFor polls cond until it holds. It bounds a wait for the goroutines
// under test to reach a state; it asserts nothing about time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func (g *gateClient) heldCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (b *batcher) pendingCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

type takeResult struct {
	key string
	res []floodgate.Result
	err error
}

// TestGroupCommit lines up Takes behind two calls in flight: the Takes
// that queue meanwhile go out together in one script call, and each gets
// its own result. A Take whose context ends while queued is dropped from
// the batch (never recorded); one whose context ends while its batch is in
// flight returns at once with an error.
func TestGroupCommit(t *testing.T) {
	g := newGateClient(t)
	s, err := New(ctx(t), Options{Client: g, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustRule(t, "batch", 1, time.Minute, floodgate.SlidingWindow)
	results := make(chan takeResult, 100)
	take := func(ctx context.Context, key string) {
		res, err := s.Take(ctx, []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
		results <- takeResult{key, res, err}
	}
	// Two lone Takes: sent at once, each alone, and held at the gate.
	go take(ctx(t), "lone-1")
	waitFor(t, "the first lone call", func() bool { return g.heldCalls() == 1 })
	go take(ctx(t), "lone-2")
	waitFor(t, "the second lone call", func() bool { return g.heldCalls() == 2 })
	// Forty more queue behind them; one of them gives up while queued.
	b := &s.batch.single
	for i := range 40 {
		go take(ctx(t), "queued-"+strconv.Itoa(i))
	}
	quitter, quit := context.WithCancel(context.Background())
	go take(quitter, "quitter")
	waitFor(t, "41 queued Takes", func() bool { return b.pendingCalls() == 41 })
	quit()
	if tr := <-results; tr.key != "quitter" || !errors.Is(tr.err, floodgate.ErrStoreUnavailable) || !errors.Is(tr.err, context.Canceled) {
		t.Fatalf("queued Take whose context ended: %+v; want its own error at once, wrapping ErrStoreUnavailable and context.Canceled", tr)
	}
	close(g.gate)
	byKey := map[string]takeResult{}
	for range 42 {
		tr := <-results
		byKey[tr.key] = tr
	}
	for key, tr := range byKey {
		if tr.err != nil || len(tr.res) != 1 || !tr.res[0].Allowed || tr.res[0].Remaining != 0 {
			t.Errorf("%s: %+v, %v; want allowed with Remaining 0", key, tr.res, tr.err)
		}
	}
	g.mu.Lock()
	calls := append([]int(nil), g.calls...)
	g.mu.Unlock()
	if len(calls) != 3 || calls[0] != 1 || calls[1] != 1 || calls[2] != 40 {
		t.Fatalf("script calls carried %v keys; want [1 1 40]: two lone Takes, then one batch of the 40 that queued (less the one that left)", calls)
	}
	// The Take that left before its batch was sent recorded nothing.
	c := rawClient(t)
	if n, err := c.Do(ctx(t), c.B().Exists().Key(stateKey(s, r, "quitter")).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("EXISTS of the abandoned Take's key = %d, %v; a Take dropped from its batch must record nothing", n, err)
	}
	if n := b.pendingCalls(); n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

// TestBatchPathHandsOver runs one script call of lone Takes (the shape
// that take.lua's batch path decides) in which quick leaves a group
// undecided: a take that fills a ring, which the general path writes
// whole. Every group, before and after the handover, must get its own
// figures and see what the groups before it recorded, whichever path
// decides it.
func TestBatchPathHandsOver(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	a := mustRule(t, "hand-a", 10, time.Minute, floodgate.SlidingWindow)
	full := mustRule(t, "hand-full", 2, time.Minute, floodgate.SlidingWindow)
	fills := mustRule(t, "hand-fills", 2, time.Minute, floodgate.SlidingWindow)
	bucket := mustRule(t, "hand-bucket", 10, time.Minute, floodgate.TokenBucket)
	lone := func(take uint64, r floodgate.Rule) group {
		return group{take, []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}}
	}
	if _, err := runGroups(ctx(t), s, []group{lone(101, full), lone(102, full), lone(103, fills)}); err != nil {
		t.Fatal(err)
	}
	res, err := runGroups(ctx(t), s, []group{
		lone(1, a),      // a new ring: the batch path
		lone(2, a),      // an append: the batch path
		lone(3, full),   // denied: the batch path
		lone(4, fills),  // fills its ring: quick hands over
		lone(5, a),      // the general path from here
		lone(6, bucket), // a token bucket
		lone(7, full),   // denied
		lone(8, a),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		allowed   bool
		remaining int64
	}{{true, 9}, {true, 8}, {false, 0}, {true, 0}, {true, 7}, {true, 9}, {false, 0}, {true, 6}}
	if len(res) != len(want) {
		t.Fatalf("%d results for %d groups", len(res), len(want))
	}
	for i, w := range want {
		r := res[i][0]
		if r.Allowed != w.allowed || r.Remaining != w.remaining || (r.Stamp.Epoch != 0) != w.allowed || (r.RetryAfter != 0) == w.allowed {
			t.Errorf("group %d: %+v; want allowed %v, Remaining %d, an epoch only when recorded, a RetryAfter only when denied", i+1, r, w.allowed, w.remaining)
		}
	}
	for _, k := range []struct {
		r    floodgate.Rule
		want int64
	}{{a, 4}, {full, 2}, {fills, 2}} {
		if n := ringLen(t, c, stateKey(s, k.r, "k")); n != k.want {
			t.Errorf("ring of %s holds %d times; want %d", k.r.Name, n, k.want)
		}
	}
}

// TestShortFormHandsOver is TestBatchPathHandsOver for a batch of lone
// takes of one rule sent as the batcher sends it, where a take fills its
// ring and the takes after it see the ring rewritten whole.
func TestShortFormHandsOver(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "short", 3, time.Minute, floodgate.SlidingWindow)
	lone := func(take uint64, key string) group {
		return group{take, []floodgate.Hit{{Rule: r, Key: key, Cost: 1}}}
	}
	if _, err := runGroups(ctx(t), s, []group{lone(101, "full"), lone(102, "full"), lone(103, "full"),
		lone(104, "fills"), lone(105, "fills")}); err != nil {
		t.Fatal(err)
	}
	var batch []*call
	for i, key := range []string{"a", "a", "full", "fills", "a", "full", "a"} {
		keys, args, err := s.appendGroup(nil, nil, "take", lone(uint64(i+1), key))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, &call{keys: keys, args: args, hits: 1})
	}
	if _, args := batchArgs(batch); len(args) != 6+2*(len(batch)-1) || args[7] != "=" {
		t.Fatalf("batch arguments %q; want the first take's epoch and 5 values, then an epoch and \"=\" a take", args)
	}
	res, err := s.send(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		allowed   bool
		remaining int64
	}{
		{true, 2},  // a new ring: the short form's loop
		{true, 1},  // an append
		{false, 0}, // a full ring: denied
		{true, 0},  // fills its ring: quick hands over
		{true, 0},  // the general path from here: fills a's ring
		{false, 0}, // denied
		{false, 0}, // a is full now
	}
	for i, w := range want {
		r := res[i][0]
		if r.Allowed != w.allowed || r.Remaining != w.remaining || (r.Stamp.Epoch != 0) != w.allowed || (r.RetryAfter != 0) == w.allowed {
			t.Errorf("take %d: %+v; want allowed %v, Remaining %d, an epoch only when recorded, a RetryAfter only when denied", i+1, r, w.allowed, w.remaining)
		}
	}
	for _, key := range []string{"a", "full", "fills"} {
		if n := ringLen(t, c, stateKey(s, r, key)); n != 3 {
			t.Errorf("ring of %s holds %d times; want 3", key, n)
		}
	}
}

// TestBatchFailureReachesEveryTake: a batch that fails fails each of its
// Takes with ErrStoreUnavailable, and nothing is retried.
func TestBatchFailureReachesEveryTake(t *testing.T) {
	g := newGateClient(t)
	s, err := New(ctx(t), Options{Client: g, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustRule(t, "fail", 5, time.Minute, floodgate.TokenBucket)
	results := make(chan takeResult, 100)
	take := func(key string) {
		res, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
		results <- takeResult{key, res, err}
	}
	go take("lone-1")
	go take("lone-2")
	waitFor(t, "two lone calls", func() bool { return g.heldCalls() == 2 })
	for i := range 10 {
		go take("queued-" + strconv.Itoa(i))
	}
	waitFor(t, "10 queued Takes", func() bool { return s.batch.single.pendingCalls() == 10 })
	g.mu.Lock()
	g.fail = errors.New("injected failure")
	g.mu.Unlock()
	close(g.gate)
	for range 12 {
		tr := <-results
		if !errors.Is(tr.err, floodgate.ErrStoreUnavailable) || tr.res != nil {
			t.Errorf("%s: %+v, %v; want an error wrapping ErrStoreUnavailable", tr.key, tr.res, tr.err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) != 3 {
		t.Fatalf("%d script calls; want 3 (two lone, one batch), none retried", len(g.calls))
	}
}

// TestDeadlineWhileInFlight: a Take whose context ends while its batch is
// in flight returns at once; the batch's late answer is dropped.
func TestDeadlineWhileInFlight(t *testing.T) {
	g := newGateClient(t)
	s, err := New(ctx(t), Options{Client: g, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustRule(t, "late", 5, time.Minute, floodgate.FixedWindow)
	results := make(chan takeResult, 10)
	take := func(ctx context.Context, key string) {
		res, err := s.Take(ctx, []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
		results <- takeResult{key, res, err}
	}
	go take(ctx(t), "lone-1")
	go take(ctx(t), "lone-2")
	waitFor(t, "two lone calls", func() bool { return g.heldCalls() == 2 })
	short, cancel := context.WithCancel(context.Background())
	go take(short, "batched")
	waitFor(t, "one queued Take", func() bool { return s.batch.single.pendingCalls() == 1 })
	// Let one lone call through: it hands the queue to a drainer, whose
	// batch is held at the gate in turn.
	g.gate <- struct{}{}
	waitFor(t, "the batch in flight", func() bool { return s.batch.single.pendingCalls() == 0 && g.heldCalls() == 2 })
	cancel()
	for range 2 {
		tr := <-results
		switch tr.key {
		case "batched":
			if !errors.Is(tr.err, floodgate.ErrStoreUnavailable) || !errors.Is(tr.err, context.Canceled) {
				t.Fatalf("Take cancelled in flight: %v; want ErrStoreUnavailable and context.Canceled", tr.err)
			}
		default:
			if tr.err != nil {
				t.Fatalf("%s: %v", tr.key, tr.err)
			}
		}
	}
	close(g.gate)
	if tr := <-results; tr.err != nil {
		t.Fatalf("%s: %v", tr.key, tr.err)
	}
}

// TestBatchersPerSlot: on a Cluster, Takes of one slot share a batcher and
// Takes of different slots do not.
func TestBatchersPerSlot(t *testing.T) {
	srv := redistest.StartCluster(t, 1, 0)
	s := newStoreOn(t, srv.Addrs()[0])
	if !s.conn.Cluster() {
		t.Fatal("the store does not see a Cluster")
	}
	a, b := s.tag("r", "a")+"s:1m0s", s.tag("r", "b")+"s:1m0s"
	if keySlot(a) == keySlot(b) {
		t.Fatal("test keys share a slot; pick others")
	}
	if s.batch.of(true, []string{a}) != s.batch.of(true, []string{s.tag("r", "a") + "t"}) {
		t.Error("two keys of one slot got different batchers")
	}
	if s.batch.of(true, []string{a}) == s.batch.of(true, []string{b}) {
		t.Error("keys of two slots share a batcher")
	}
	// And the batched path works there, many Takes at once.
	r := mustRule(t, "slots", 3, time.Minute, floodgate.SlidingWindow)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := map[string]int{}
	for i := range 60 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i%4)
			res, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
			if err != nil {
				t.Error(err)
				return
			}
			if res[0].Allowed {
				mu.Lock()
				allowed[key]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := range 4 {
		if n := allowed[fmt.Sprintf("k%d", i)]; n != 3 {
			t.Errorf("key k%d: %d allowed, limit 3", i, n)
		}
	}
}

// TestGroupCommitBatchesLeases queues leases (floodgate.Hit.Lease) among
// plain Takes behind two calls in flight: they go out in one script call,
// and each Take gets the figures that the same Takes, one call each in the
// same order, get on a store of their own, and leaves the same state (a
// Peek of each key after). In the batch, a sliding window's or token
// bucket's lease is stamped Lease after a plain Take's time (its units'
// time), and a fixed window's or counter's at it. One batch holds sliding
// windows only (take.lua's fast path), the other every algorithm.
func TestGroupCommitBatchesLeases(t *testing.T) {
	const lease = time.Second
	sliding := mustRule(t, "bl-s", 10, time.Hour, floodgate.SlidingWindow)
	other := mustRule(t, "bl-s2", 3, time.Hour, floodgate.SlidingWindow)
	bucket := mustRule(t, "bl-t", 10, time.Hour, floodgate.TokenBucket)
	fixed := mustRule(t, "bl-f", 10, time.Hour, floodgate.FixedWindow)
	counter := mustRule(t, "bl-c", 10, time.Hour, floodgate.SlidingWindowCounter)
	slidingOnly := []leaseTake{
		{"sliding lease", []floodgate.Hit{{Rule: sliding, Key: "a", Cost: 4, Lease: lease}}},
		{"sliding take after it", []floodgate.Hit{{Rule: sliding, Key: "a", Cost: 1}}},
		{"sliding lease that does not fit", []floodgate.Hit{{Rule: sliding, Key: "a", Cost: 6, Lease: lease}}},
		{"sliding lease of another key, the same hit", []floodgate.Hit{{Rule: sliding, Key: "b", Cost: 4, Lease: lease}}},
		{"sliding lease of another rule", []floodgate.Hit{{Rule: other, Key: "a", Cost: 2, Lease: lease}}},
		{"sliding take of it", []floodgate.Hit{{Rule: other, Key: "a", Cost: 1}}},
		{"sliding take past it", []floodgate.Hit{{Rule: other, Key: "a", Cost: 1}}},
	}
	for _, tc := range []struct {
		name  string
		takes []leaseTake
		rules []floodgate.Rule
	}{
		{"sliding windows", slidingOnly, []floodgate.Rule{sliding, other}},
		{"every algorithm", append(slidingOnly[:4:4],
			leaseTake{"bucket lease", []floodgate.Hit{{Rule: bucket, Key: "a", Cost: 3, Lease: lease}}},
			leaseTake{"bucket take after it", []floodgate.Hit{{Rule: bucket, Key: "a", Cost: 1}}},
			leaseTake{"fixed lease", []floodgate.Hit{{Rule: fixed, Key: "a", Cost: 5, Lease: lease}}},
			leaseTake{"counter lease", []floodgate.Hit{{Rule: counter, Key: "a", Cost: 5, Lease: lease}}},
			leaseTake{"group after the leases", []floodgate.Hit{{Rule: sliding, Key: "a", Cost: 1}, {Rule: fixed, Key: "a", Cost: 5}}},
			leaseTake{"group that does not fit", []floodgate.Hit{{Rule: counter, Key: "a", Cost: 1}, {Rule: fixed, Key: "a", Cost: 1}}},
		), []floodgate.Rule{sliding, bucket, fixed, counter}},
	} {
		t.Run(tc.name, func(t *testing.T) { batchedAsAlone(t, tc.takes, tc.rules) })
	}
}

// leaseTake is one Take of TestGroupCommitBatchesLeases.
type leaseTake struct {
	name string
	hits []floodgate.Hit
}

// batchedAsAlone runs takes one call each on a store, and in one batch
// on another, and compares every figure, and each rule's keys "a" and
// "b" after. The second take must be a plain Take of one hit, the
// batch's time. The leases must be of 1s.
func batchedAsAlone(t *testing.T, takes []leaseTake, rules []floodgate.Rule) {
	one := newStore(t)
	var want [][]floodgate.Result
	nhits := 0
	start := time.Now()
	for _, tk := range takes {
		res, err := one.Take(ctx(t), tk.hits)
		if err != nil {
			t.Fatalf("%s alone: %v", tk.name, err)
		}
		want = append(want, res)
		nhits += len(tk.hits)
	}

	g := newGateClient(t)
	s, err := New(ctx(t), Options{Client: g, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lone := mustRule(t, "bl-lone", 10, time.Hour, floodgate.FixedWindow)
	results := make(chan takeResult, len(takes)+2)
	take := func(key string, hits []floodgate.Hit) {
		res, err := s.Take(ctx(t), hits)
		results <- takeResult{key, res, err}
	}
	go take("lone-1", []floodgate.Hit{{Rule: lone, Key: "1", Cost: 1}})
	go take("lone-2", []floodgate.Hit{{Rule: lone, Key: "2", Cost: 1}})
	waitFor(t, "two lone calls", func() bool { return g.heldCalls() == 2 })
	for i, tk := range takes {
		go take(tk.name, tk.hits)
		waitFor(t, tk.name+" queued", func() bool { return s.batch.single.pendingCalls() == i+1 })
	}
	close(g.gate)
	got := map[string][]floodgate.Result{}
	for range len(takes) + 2 {
		tr := <-results
		if tr.err != nil {
			t.Fatalf("%s: %v", tr.key, tr.err)
		}
		got[tr.key] = tr.res
	}
	g.mu.Lock()
	calls := append([]int(nil), g.calls...)
	g.mu.Unlock()
	if len(calls) != 3 || calls[2] != nhits {
		t.Fatalf("script calls carried %v keys; want [1 1 %d]: two lone Takes, then one batch of the %d queued Takes", calls, nhits, len(takes))
	}

	// A figure of a Take alone and of its batched twin differ by the time
	// between them at most (a window's end is so far off), less than a
	// lease's 1s; so do the Peeks below, which run within it too.
	tol := 2 * time.Since(start)
	if tol > 500*time.Millisecond {
		t.Skipf("the Takes took %v, too long to tell a lease's 1s from the time between them", tol/2)
	}
	at := got[takes[1].name][0].Stamp.At
	for i, tk := range takes {
		for j, h := range tk.hits {
			g, w := got[tk.name][j], want[i][j]
			if g.Allowed != w.Allowed || g.Remaining != w.Remaining || !near(g.ResetAfter, w.ResetAfter, tol) ||
				!near(g.RetryAfter, w.RetryAfter, tol) || (g.RetryAfter == 0) != (w.RetryAfter == 0) ||
				!near(g.Lease, w.Lease, tol) || (g.Lease == 0) != (w.Lease == 0) || (g.Stamp.Epoch == 0) != (w.Stamp.Epoch == 0) {
				t.Errorf("%s, hit %d, batched: %+v; alone: %+v; a batched Take must get the figures of a call of its own", tk.name, j, g, w)
			}
			if g.Stamp.Epoch == 0 {
				continue
			}
			wantAt := at
			if a := h.Rule.Algorithm; h.Lease != 0 && (a == floodgate.SlidingWindow || a == floodgate.TokenBucket) {
				wantAt = at.Add(h.Lease)
			}
			if !g.Stamp.At.Equal(wantAt) {
				t.Errorf("%s, hit %d, batched: stamped %v after the batch's time; want %v", tk.name, j, g.Stamp.At.Sub(at), wantAt.Sub(at))
			}
		}
	}
	for _, r := range rules {
		for _, key := range []string{"a", "b"} {
			h := []floodgate.Hit{{Rule: r, Key: key, Cost: 1}}
			g, err := s.Peek(ctx(t), h)
			if err != nil {
				t.Fatal(err)
			}
			w, err := one.Peek(ctx(t), h)
			if err != nil {
				t.Fatal(err)
			}
			if g[0].Allowed != w[0].Allowed || g[0].Remaining != w[0].Remaining || !near(g[0].ResetAfter, w[0].ResetAfter, tol) {
				t.Errorf("Peek of %s key %s after the batch: %+v; after the Takes alone: %+v; want the same state", r.Name, key, g[0], w[0])
			}
		}
	}
}

func near(got, want, tol time.Duration) bool {
	return got >= want-tol && got <= want+tol
}
