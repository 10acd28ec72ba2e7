package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// scriptStore answers each Take with the next of its scripted replies (the
// last one again once they run out), and Peek with the first. It embeds
// the Store interface so that it declares only what it scripts.
type scriptStore struct {
	floodgate.Store
	mu      sync.Mutex
	replies [][]floodgate.Result
	takes   int
}

func (s *scriptStore) Take(_ context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.replies[min(s.takes, len(s.replies)-1)]
	s.takes++
	if len(r) != len(hits) {
		return nil, fmt.Errorf("script has %d results for %d hits", len(r), len(hits))
	}
	return append([]floodgate.Result(nil), r...), nil
}

func (s *scriptStore) Peek(_ context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return append([]floodgate.Result(nil), s.replies[0]...), nil
}

func scripted(t *testing.T, replies ...[]floodgate.Result) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(&scriptStore{replies: replies}, floodgate.Options{Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// threeHits are hits under three rules with distinct limits and windows,
// so that a decision's Policy, Limit and Window show which hit it took.
func threeHits(t *testing.T) []floodgate.Hit {
	t.Helper()
	hits := make([]floodgate.Hit, 3)
	for i, name := range []string{"a", "b", "c"} {
		hits[i] = floodgate.Hit{Rule: mustRule(t, name, int64(10*(i+1)), time.Duration(i+1)*time.Minute), Key: "k", Cost: 2}
	}
	return hits
}

func denied(remaining int64, reset, retry time.Duration) floodgate.Result {
	return floodgate.Result{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

func allowed(remaining int64, reset time.Duration) floodgate.Result {
	return floodgate.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

// wantFigures compares every public figure of d with want.
func wantFigures(t *testing.T, what string, d, want floodgate.Decision) {
	t.Helper()
	if d.Allowed != want.Allowed || d.Policy != want.Policy || d.Limit != want.Limit || d.Window != want.Window ||
		d.Remaining != want.Remaining || d.ResetAfter != want.ResetAfter || d.RetryAfter != want.RetryAfter {
		t.Errorf("%s = {Allowed:%v Policy:%s Limit:%d Window:%v Remaining:%d ResetAfter:%v RetryAfter:%v}; want %+v",
			what, d.Allowed, d.Policy, d.Limit, d.Window, d.Remaining, d.ResetAfter, d.RetryAfter, want)
	}
}

// decisionOf is the decision a check reports for hit h answered with r,
// as the top-level figures or an element of Each.
func decisionOf(h floodgate.Hit, r floodgate.Result, allowedCheck bool) floodgate.Decision {
	d := floodgate.Decision{Allowed: r.Allowed, Policy: h.Rule.Name, Limit: h.Rule.Limit, Window: h.Rule.Window,
		Remaining: r.Remaining, ResetAfter: r.ResetAfter, RetryAfter: r.RetryAfter}
	if r.Allowed && !allowedCheck {
		d.Remaining += h.Cost // nothing was recorded
	}
	return d
}

// TestCheckReportsTheWorstOfSeveral: a check of three hits reports, on
// top, the worst hit with all its figures: denied before allowed, then the
// longest RetryAfter, then the fewest Remaining, then the longest
// ResetAfter, and the first hit on a full tie. Each holds every hit's own
// figures, with the cost of an allowed hit given back when the check is
// denied. Every order of the hits is tried, so the worst is found wherever
// it stands.
func TestCheckReportsTheWorstOfSeveral(t *testing.T) {
	hits := threeHits(t)
	for _, tc := range []struct {
		name    string
		results []floodgate.Result
		worst   int
	}{
		{"one denied", []floodgate.Result{allowed(5, time.Minute), denied(0, 2*time.Minute, time.Second), allowed(1, 3*time.Minute)}, 1},
		{"several denied: longest retry", []floodgate.Result{denied(0, time.Minute, 5*time.Second), denied(0, time.Minute, 20*time.Second), denied(0, time.Minute, 10*time.Second)}, 1},
		{"denied twice, allowed once", []floodgate.Result{denied(3, time.Hour, 30*time.Second), allowed(0, time.Hour), denied(0, time.Hour, 40*time.Second)}, 2},
		{"retry tie: fewest remaining", []floodgate.Result{denied(2, time.Minute, 10*time.Second), denied(1, time.Minute, 10*time.Second), denied(3, time.Minute, 10*time.Second)}, 1},
		{"retry and remaining tie: longest reset", []floodgate.Result{denied(1, time.Minute, 10*time.Second), denied(1, time.Minute, 10*time.Second), denied(1, 2*time.Minute, 10*time.Second)}, 2},
		{"full tie: the first", []floodgate.Result{denied(1, time.Minute, 10*time.Second), denied(1, time.Minute, 10*time.Second), denied(1, time.Minute, 10*time.Second)}, 0},
		{"allowed: fewest remaining", []floodgate.Result{allowed(7, time.Minute), allowed(2, time.Minute), allowed(4, time.Minute)}, 1},
		{"allowed, remaining tie: longest reset", []floodgate.Result{allowed(2, time.Minute), allowed(2, 3*time.Minute), allowed(2, 2*time.Minute)}, 1},
		{"allowed, full tie: the first", []floodgate.Result{allowed(2, time.Minute), allowed(2, time.Minute), allowed(2, time.Minute)}, 0},
	} {
		for _, order := range [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, order), func(t *testing.T) {
				hs := make([]floodgate.Hit, 3)
				rs := make([]floodgate.Result, 3)
				worst := 0
				for i, j := range order {
					hs[i], rs[i] = hits[i], tc.results[j]
					if j == tc.worst {
						worst = i
					}
				}
				if tied(tc.results, tc.worst) {
					worst = 0 // every hit ties: the first in the check's order
				}
				allowedCheck := rs[0].Allowed && rs[1].Allowed && rs[2].Allowed
				for _, peek := range []bool{false, true} {
					l := scripted(t, rs)
					var d floodgate.Decision
					var err error
					if peek {
						d, err = l.Peek(context.Background(), hs...)
					} else {
						d, err = l.Check(context.Background(), hs...)
					}
					if err != nil {
						t.Fatal(err)
					}
					want := decisionOf(hs[worst], rs[worst], allowedCheck)
					want.Allowed = allowedCheck
					wantFigures(t, fmt.Sprintf("peek=%v: top", peek), d, want)
					if len(d.Each) != 3 {
						t.Fatalf("Each has %d decisions, want 3", len(d.Each))
					}
					for i := range hs {
						wantFigures(t, fmt.Sprintf("peek=%v: Each[%d]", peek, i), d.Each[i], decisionOf(hs[i], rs[i], allowedCheck))
					}
				}
			})
		}
	}
}

// tied reports whether every result equals results[w] in what decides the
// worst.
func tied(results []floodgate.Result, w int) bool {
	for _, r := range results {
		if r != results[w] {
			return false
		}
	}
	return true
}

// TestCheckWithSeveralDeniedHitsOnMemstore: on a real store, with three
// limits exhausted at different times, the check reports the hit that will
// wait longest (two tie here, and the later reset wins), and every figure
// of every hit matches what each key alone would report.
func TestCheckWithSeveralDeniedHitsOnMemstore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := memstore.New(memstore.Options{Now: clock})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hits := []floodgate.Hit{
		{Rule: mustRule(t, "second", 2, time.Minute), Key: "k"},
		{Rule: mustRule(t, "first", 1, time.Minute), Key: "k"},
		{Rule: mustRule(t, "open", 10, time.Minute), Key: "k"},
		{Rule: mustRule(t, "third", 3, time.Minute), Key: "k"},
	}
	// first fills at 0s; second takes at 10s and 20s; third at 10s, 20s
	// and 30s.
	for i, h := range []floodgate.Hit{hits[1], hits[0], hits[3], hits[0], hits[3], hits[3]} {
		if i > 0 && i%2 == 1 {
			advance(10 * time.Second)
		}
		if d, err := l.Allow(ctx, h.Rule, h.Key); err != nil || !d.Allowed {
			t.Fatalf("filling %s: %+v, %v", h.Rule.Name, d, err)
		}
	}
	advance(5 * time.Second) // 35s after "first" filled
	d, err := l.Check(ctx, hits...)
	if err != nil {
		t.Fatal(err)
	}
	peek, err := l.Peek(ctx, hits...)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hits {
		alone, err := l.Peek(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if alone.Allowed {
			alone.Remaining += h.Cost + 1 // Peek reports what would be left after the hit; the check took nothing
		}
		wantFigures(t, "Each["+h.Rule.Name+"]", d.Each[i], alone)
		wantFigures(t, "Peek's Each["+h.Rule.Name+"]", peek.Each[i], alone)
	}
	// The reference: the documented order, worst first.
	worst := 0
	for i, e := range d.Each {
		w := d.Each[worst]
		switch {
		case e.Allowed != w.Allowed:
			if !e.Allowed {
				worst = i
			}
		case e.RetryAfter != w.RetryAfter:
			if e.RetryAfter > w.RetryAfter {
				worst = i
			}
		case e.Remaining != w.Remaining:
			if e.Remaining < w.Remaining {
				worst = i
			}
		case e.ResetAfter > w.ResetAfter:
			worst = i
		}
	}
	want := d.Each[worst]
	want.Allowed = false
	wantFigures(t, "top", d, want)
	wantFigures(t, "Peek's top", peek, want)
	if d.Allowed || d.Policy != "third" || d.RetryAfter != 35*time.Second || d.ResetAfter != 55*time.Second {
		t.Errorf("got %+v; want denied by third (its retry ties second's at 35s, its reset is the later, 55s)", d)
	}
	if e := d.Each[2]; !e.Allowed || e.Remaining != 10 || e.RetryAfter != 0 {
		t.Errorf("the open limit in a denied check = %+v; want allowed with all 10 remaining", e)
	}
	for _, i := range []int{0, 1, 3} {
		if d.Each[i].Allowed || d.Each[i].RetryAfter <= 0 {
			t.Errorf("Each[%d] = %+v; want denied", i, d.Each[i])
		}
	}
}

// TestCheckRecordsAllOrNothing: an allowed check of several hits records
// each with its cost and reports each key's new figures; a denied one
// records none, and its allowed hits report the quota they still have.
func TestCheckRecordsAllOrNothing(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	a := floodgate.Hit{Rule: mustRule(t, "a", 10, time.Minute), Key: "k", Cost: 3}
	b := floodgate.Hit{Rule: mustRule(t, "b", 5, time.Minute), Key: "k", Cost: 2}
	d, err := l.Check(ctx, a, b)
	if err != nil || !d.Allowed || d.Each[0].Remaining != 7 || d.Each[1].Remaining != 3 || d.Remaining != 3 || d.Policy != "b" {
		t.Fatalf("first check = %+v, %v; want allowed, a at 7, b at 3, b on top", d, err)
	}
	d, err = l.Check(ctx, a, b)
	if err != nil || !d.Allowed || d.Each[0].Remaining != 4 || d.Each[1].Remaining != 1 {
		t.Fatalf("second check = %+v, %v; want allowed, a at 4, b at 1", d, err)
	}
	// b has 1 left, the hit costs 2: denied, a not recorded and still at 4.
	for _, hs := range [][]floodgate.Hit{{a, b}, {b, a}} {
		d, err = l.Check(ctx, hs...)
		if err != nil || d.Allowed || d.Policy != "b" || d.Remaining != 1 || d.RetryAfter <= 0 {
			t.Fatalf("check %s+%s = %+v, %v; want denied by b", hs[0].Rule.Name, hs[1].Rule.Name, d, err)
		}
		ai := 0
		if hs[0].Rule.Name != "a" {
			ai = 1
		}
		if e := d.Each[ai]; !e.Allowed || e.Remaining != 4 || e.RetryAfter != 0 {
			t.Fatalf("a in a denied check = %+v; want allowed, still 4 remaining", e)
		}
	}
	// Peek reports what a hit would leave: 4 - 3.
	if p, _ := l.Peek(ctx, a); p.Remaining != 1 || !p.Allowed {
		t.Fatalf("Peek(a) = %+v after denied checks; want 1 left after it: a denied check recorded a hit", p)
	}
}

// TestRefundOfAnAllowedCheck: Refund gives back what an allowed decision
// recorded, all of it or one element of Each; a decision of Peek recorded
// nothing and refunds nothing.
func TestRefundOfAnAllowedCheck(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	a := floodgate.Hit{Rule: mustRule(t, "a", 3, time.Minute), Key: "k"}
	b := floodgate.Hit{Rule: mustRule(t, "b", 3, time.Minute), Key: "k"}
	remaining := func() (int64, int64) {
		d, err := l.Peek(ctx, a, b)
		if err != nil {
			t.Fatal(err)
		}
		return d.Each[0].Remaining + 1, d.Each[1].Remaining + 1 // Peek reports what a hit would leave
	}
	d, err := l.Check(ctx, a, b)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if err := l.Refund(ctx, d.Each[1]); err != nil {
		t.Fatal(err)
	}
	if ra, rb := remaining(); ra != 2 || rb != 3 {
		t.Fatalf("after refunding b: a %d, b %d remaining; want 2 and 3", ra, rb)
	}
	if err := l.Refund(ctx, d); err != nil {
		t.Fatal(err)
	}
	if ra, rb := remaining(); ra != 3 || rb != 3 {
		t.Fatalf("after refunding the check: a %d, b %d remaining; want 3 and 3", ra, rb)
	}
	one, err := l.Allow(ctx, a.Rule, a.Key)
	if err != nil || !one.Allowed || one.Remaining != 2 {
		t.Fatal(one, err)
	}
	peeked, _ := l.Peek(ctx, a)
	if err := l.Refund(ctx, peeked); err != nil {
		t.Fatal(err)
	}
	if ra, _ := remaining(); ra != 2 {
		t.Fatalf("refunding a Peek changed a to %d remaining; want 2", ra)
	}
	if err := l.Refund(ctx, one); err != nil {
		t.Fatal(err)
	}
	if ra, _ := remaining(); ra != 3 {
		t.Fatalf("after refunding Allow: a %d remaining; want 3", ra)
	}
}

// TestWaitAtItsBoundary: Wait waits for a RetryAfter equal to maxDelay (the
// documented bound is inclusive), rejects at once one just above it, and
// waits at most maxDelay in all.
func TestWaitAtItsBoundary(t *testing.T) {
	h := threeHits(t)[:1]
	const delay = 30 * time.Millisecond
	deny := []floodgate.Result{denied(0, time.Minute, delay)}
	admit := []floodgate.Result{allowed(4, time.Minute)}
	ctx := context.Background()

	start := time.Now()
	d, err := scripted(t, deny, admit).Wait(ctx, delay, h...)
	if err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("Wait(maxDelay = RetryAfter) = %+v, %v; want allowed after waiting", d, err)
	}
	if waited := time.Since(start); waited < delay {
		t.Fatalf("Wait returned after %v; it must wait the RetryAfter, %v", waited, delay)
	}

	start = time.Now()
	d, err = scripted(t, deny, admit).Wait(ctx, delay-time.Microsecond, h...)
	if err != nil || d.Allowed || d.RetryAfter != delay {
		t.Fatalf("Wait(maxDelay < RetryAfter) = %+v, %v; want the denial", d, err)
	}
	if waited := time.Since(start); waited >= delay {
		t.Fatalf("Wait took %v to reject; it must not wait for what it cannot get", waited)
	}

	// A deadline that leaves room for the wait: Wait waits.
	long, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d, err := scripted(t, deny, admit).Wait(long, delay, h...); err != nil || !d.Allowed {
		t.Fatalf("Wait with a distant deadline = %+v, %v; want allowed", d, err)
	}

	// The waits share maxDelay: after waiting 20ms of 30ms, a second
	// RetryAfter of 20ms no longer fits, and Wait answers the denial
	// without a third check (a budget per wait would wait again and be
	// admitted).
	st := &scriptStore{replies: [][]floodgate.Result{{denied(0, time.Minute, 20*time.Millisecond)}, {denied(0, time.Minute, 20*time.Millisecond)}, admit}}
	l, err := floodgate.New(st, floodgate.Options{Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.Wait(ctx, delay, h...); err != nil || d.Allowed || d.RetryAfter != 20*time.Millisecond || st.takes != 2 {
		t.Fatalf("Wait(30ms) after a wait of 20ms = %+v, %v after %d checks; want the second denial, after 2", d, err, st.takes)
	}
}

// blockingStore answers only when its context ends, or after delay.
type blockingStore struct {
	floodgate.Store
	delay time.Duration // 0: never
}

func (s blockingStore) wait(ctx context.Context) error {
	var after <-chan time.Time
	if s.delay > 0 {
		after = time.After(s.delay)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-after:
		return nil
	}
}

func (s blockingStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return make([]floodgate.Result, len(hits)), nil
}

func (s blockingStore) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.Take(ctx, hits)
}

func (s blockingStore) Reset(ctx context.Context, _ floodgate.Rule, _ string) error {
	return s.wait(ctx)
}

// TestDefaultBudget: with Timeout zero, every store call gets the
// documented default, 50 ms, no less and not unbounded; a negative Timeout
// leaves only the caller's context.
func TestDefaultBudget(t *testing.T) {
	const defaultTimeout = 50 * time.Millisecond
	r := mustRule(t, "r", 1, time.Minute)
	hit := floodgate.Hit{Rule: r, Key: "k"}
	l, err := floodgate.New(blockingStore{}, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Allow": func() error { _, err := l.Allow(ctx, r, "k"); return err },
		"Check": func() error { _, err := l.Check(ctx, hit, floodgate.Hit{Rule: r, Key: "k2"}); return err },
		"Peek":  func() error { _, err := l.Peek(ctx, hit); return err },
		"Reset": func() error { return l.Reset(ctx, r, "k") },
	} {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Errorf("%s on a stalled store = %v; want ErrStoreUnavailable and DeadlineExceeded", name, err)
		}
		if took < defaultTimeout || took > 2*time.Second {
			t.Errorf("%s gave up after %v; want the default budget, %v", name, took, defaultTimeout)
		}
	}

	// A store slower than the default budget answers when Timeout is
	// negative, and the caller's deadline still holds.
	slow, err := floodgate.New(blockingStore{delay: 3 * defaultTimeout / 2}, floodgate.Options{Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Allow(ctx, r, "k"); err != nil {
		t.Fatalf("Allow with no budget = %v; want the slow store's answer", err)
	}
	short, cancel := context.WithTimeout(ctx, defaultTimeout/5)
	defer cancel()
	if _, err := slow.Allow(short, r, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Allow past the caller's deadline = %v; want DeadlineExceeded", err)
	}
}

// TestLocalStoreDecisionsDoNotAllocate: on a LocalStore (memstore), a
// single-hit decision takes no time budget and allocates nothing.
func TestLocalStoreDecisionsDoNotAllocate(t *testing.T) {
	l := newLimiter(t)
	r := mustRule(t, "r", 5, time.Minute)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { l.Allow(ctx, r, "k") }); n != 0 {
		t.Fatalf("%v allocations per Allow on memstore, want 0", n)
	}
}
