package floodgate

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// countingStore answers every Take with answer(hits) and counts the calls.
type countingStore struct {
	mu     sync.Mutex
	takes  int
	answer func(hits []Hit) []Result
	during func() // runs inside each Take, as if concurrently with it
}

func (s *countingStore) Take(_ context.Context, hits []Hit) ([]Result, error) {
	s.mu.Lock()
	s.takes++
	during := s.during
	s.mu.Unlock()
	if during != nil {
		during()
	}
	return s.answer(hits), nil
}

func (s *countingStore) Peek(context.Context, []Hit) ([]Result, error) { return nil, nil }
func (s *countingStore) Refund(context.Context, []Receipt) error       { return nil }
func (s *countingStore) Renew(_ context.Context, rs []Receipt) ([]Stamp, error) {
	return make([]Stamp, len(rs)), nil
}
func (s *countingStore) Reset(context.Context, Rule, string) error { return nil }

func (s *countingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes
}

// localCountingStore is a countingStore that is also a LocalStore, for the
// single-hit path.
type localCountingStore struct{ *countingStore }

var _ LocalStore = localCountingStore{}

func (s localCountingStore) TakeOne(ctx context.Context, h Hit) (Result, error) {
	r, err := s.Take(ctx, []Hit{h})
	return r[0], err
}

// fakeClock is the denial cache's clock, moved by hand.
type fakeClock struct {
	mu  sync.Mutex
	now int64
}

func (c *fakeClock) read() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}

// deny answers every hit with a denial: RetryAfter 10s, ResetAfter 20s.
func deny(hits []Hit) []Result {
	out := make([]Result, len(hits))
	for i := range out {
		out[i] = Result{Remaining: 0, RetryAfter: 10 * time.Second, ResetAfter: 20 * time.Second}
	}
	return out
}

func allow(hits []Hit) []Result {
	out := make([]Result, len(hits))
	for i := range out {
		out[i] = Result{Allowed: true, Remaining: 1, ResetAfter: time.Minute}
	}
	return out
}

func cachedLimiter(t *testing.T, store Store, size int) (*Limiter, *fakeClock) {
	t.Helper()
	l, err := New(store, Options{DenialCacheSize: size})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: 1_000_000}
	l.denials.now = clock.read
	return l, clock
}

func testRule(t *testing.T, name string) Rule {
	t.Helper()
	r, err := NewRule(name, 5, time.Minute, SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDenialCacheCountsDown: a denial is served locally, with RetryAfter
// and ResetAfter counting down, until the store's RetryAfter has passed;
// then the store decides again.
func TestDenialCacheCountsDown(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run("local="+strconv.FormatBool(local), func(t *testing.T) {
			cs := &countingStore{answer: deny}
			var store Store = cs
			if local {
				store = localCountingStore{cs}
			}
			l, clock := cachedLimiter(t, store, 100)
			r := testRule(t, "r")
			ctx := context.Background()
			for _, step := range []struct {
				advance           time.Duration
				takes             int
				retryAfter, reset time.Duration
			}{
				{0, 1, 10 * time.Second, 20 * time.Second}, // the store denies
				{0, 1, 10 * time.Second, 20 * time.Second}, // cached
				{4 * time.Second, 1, 6 * time.Second, 16 * time.Second},
				{5*time.Second + 999*time.Millisecond, 1, time.Millisecond, 10*time.Second + time.Millisecond},
				{time.Millisecond, 2, 10 * time.Second, 20 * time.Second}, // RetryAfter passed: the store again
			} {
				clock.advance(step.advance)
				d, err := l.Allow(ctx, r, "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed || d.RetryAfter != step.retryAfter || d.ResetAfter != step.reset || d.Policy != "r" || d.Limit != 5 {
					t.Fatalf("after %v: got %+v; want denied with RetryAfter %v, ResetAfter %v", step.advance, d, step.retryAfter, step.reset)
				}
				if n := cs.count(); n != step.takes {
					t.Fatalf("after %v: %d store calls, want %d", step.advance, n, step.takes)
				}
			}
		})
	}
}

// TestDenialCacheCountsFromTheSend: time spent in the store call counts,
// so a cached RetryAfter never exceeds what the store would answer.
func TestDenialCacheCountsFromTheSend(t *testing.T) {
	cs := &countingStore{answer: deny}
	l, clock := cachedLimiter(t, cs, 100)
	cs.during = func() { clock.advance(time.Second) }
	r := testRule(t, "r")
	l.Allow(context.Background(), r, "k")
	d, _ := l.Allow(context.Background(), r, "k")
	if cs.count() != 1 || d.RetryAfter != 9*time.Second {
		t.Fatalf("got %+v after %d store calls; want the cached denial with RetryAfter 9s (10s computed by a store call that took 1s)", d, cs.count())
	}
}

// TestDenialCacheIsPerCheck: a check that differs in key, rule, cost or
// hits is not answered by another check's denial.
func TestDenialCacheIsPerCheck(t *testing.T) {
	cs := &countingStore{answer: deny}
	l, _ := cachedLimiter(t, cs, 100)
	ctx := context.Background()
	r, other := testRule(t, "r"), testRule(t, "other")
	checks := [][]Hit{
		{{Rule: r, Key: "k"}},
		{{Rule: r, Key: "k2"}},
		{{Rule: other, Key: "k"}},
		{{Rule: r, Key: "k", Cost: 2}},
		{{Rule: r, Key: "k"}, {Rule: other, Key: "k"}},
		{{Rule: other, Key: "k"}, {Rule: r, Key: "k"}},
	}
	for i, hits := range checks {
		if _, err := l.Check(ctx, hits...); err != nil {
			t.Fatal(err)
		}
		if n := cs.count(); n != i+1 {
			t.Fatalf("check %d (%+v): %d store calls, want %d: a denial must answer only identical checks", i, hits, n, i+1)
		}
	}
	for _, hits := range checks {
		if _, err := l.Check(ctx, hits...); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.count(); n != len(checks) {
		t.Fatalf("%d store calls after repeating every check, want %d: each repeat must be cached", n, len(checks))
	}
}

// TestDenialCacheNeverAnswersACharge: a check that records (a charge past
// its limit: Overdraw) is not a denial to cache, and a cached denial of
// the same hit without Overdraw must not answer it, or the charge would
// go unrecorded.
func TestDenialCacheNeverAnswersACharge(t *testing.T) {
	for _, local := range []bool{false, true} {
		cs := &countingStore{answer: deny}
		var store Store = cs
		if local {
			store = localCountingStore{cs}
		}
		l, _ := cachedLimiter(t, store, 100)
		ctx := context.Background()
		r := testRule(t, "r")
		if d, _ := l.Allow(ctx, r, "k"); d.Allowed || d.Recorded {
			t.Fatalf("local %v: %+v; want the store's denial", local, d)
		}
		for i := range 3 {
			d, err := l.Check(ctx, Hit{Rule: r, Key: "k", Cost: 1, Overdraw: true})
			if err != nil || !d.Recorded {
				t.Fatalf("local %v: charge %d: %+v, %v; want recorded", local, i, d, err)
			}
			if n := cs.count(); n != 2+i {
				t.Fatalf("local %v: charge %d: %d store calls, want %d: every charge must reach the store", local, i, n, 2+i)
			}
		}
		if d, _ := l.Allow(ctx, r, "k"); d.Allowed || cs.count() != 4 {
			t.Fatalf("local %v: %+v after %d store calls; want the first denial, still cached", local, d, cs.count())
		}
	}
}

// TestDenialCacheMultiKey: a denied multi-key check is cached whole, Each
// included, and the caller may not alter the cache through Each.
func TestDenialCacheMultiKey(t *testing.T) {
	cs := &countingStore{answer: func(hits []Hit) []Result {
		return []Result{{Allowed: true, Remaining: 3, ResetAfter: time.Minute}, {RetryAfter: 10 * time.Second, ResetAfter: 20 * time.Second}}
	}}
	l, clock := cachedLimiter(t, cs, 100)
	hits := []Hit{{Rule: testRule(t, "ip"), Key: "192.0.2.1"}, {Rule: testRule(t, "account"), Key: "alice"}}
	first, _ := l.Check(context.Background(), hits...)
	first.Each[1].RetryAfter = time.Hour
	clock.advance(3 * time.Second)
	d, _ := l.Check(context.Background(), hits...)
	if cs.count() != 1 || d.Allowed || d.Policy != "account" || d.RetryAfter != 7*time.Second || len(d.Each) != 2 ||
		d.Each[1].RetryAfter != 7*time.Second || d.Each[0].ResetAfter != 57*time.Second || !d.Each[0].Allowed {
		t.Fatalf("got %+v after %d store calls; want the cached denial counted down by 3s", d, cs.count())
	}
}

// TestDenialCacheClearedByRefundAndReset: Refund and Reset through the
// Limiter clear the cached denials of their keys, also those of a check
// in flight when they ran.
func TestDenialCacheClearedByRefundAndReset(t *testing.T) {
	ctx := context.Background()
	r := testRule(t, "r")
	hit := Hit{Rule: r, Key: "k"}

	t.Run("Reset", func(t *testing.T) {
		cs := &countingStore{answer: deny}
		l, _ := cachedLimiter(t, cs, 100)
		l.Allow(ctx, r, "k")
		if err := l.Reset(ctx, r, "k"); err != nil {
			t.Fatal(err)
		}
		l.Allow(ctx, r, "k")
		if n := cs.count(); n != 2 {
			t.Fatalf("%d store calls; after Reset the store must decide again", n)
		}
	})

	t.Run("Refund", func(t *testing.T) {
		cs := &countingStore{answer: allow}
		l, _ := cachedLimiter(t, cs, 100)
		ok, _ := l.Check(ctx, hit, Hit{Rule: testRule(t, "other"), Key: "x"})
		cs.answer = deny
		l.Allow(ctx, r, "k")
		l.Allow(ctx, r, "k")
		if n := cs.count(); n != 2 {
			t.Fatalf("%d store calls; want the second denial cached", n)
		}
		if err := l.Refund(ctx, ok.Each[0]); err != nil {
			t.Fatal(err)
		}
		l.Allow(ctx, r, "k")
		if n := cs.count(); n != 3 {
			t.Fatalf("%d store calls; after a Refund of the key the store must decide again", n)
		}
	})

	t.Run("ResetDuringTheCheck", func(t *testing.T) {
		cs := &countingStore{answer: deny}
		l, _ := cachedLimiter(t, cs, 100)
		cs.during = func() {
			cs.mu.Lock()
			cs.during = nil
			cs.mu.Unlock()
			if err := l.Reset(ctx, r, "k"); err != nil {
				t.Error(err)
			}
		}
		l.Allow(ctx, r, "k") // denied by the store while a Reset runs
		l.Allow(ctx, r, "k")
		if n := cs.count(); n != 2 {
			t.Fatalf("%d store calls; a denial decided before a Reset must not be cached past it", n)
		}
	})
}

// TestDenialCacheIsBounded: past its size the cache replaces entries, and
// the newest denial is always cached.
func TestDenialCacheIsBounded(t *testing.T) {
	for _, size := range []int{4, 100} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			cs := &countingStore{answer: deny}
			l, _ := cachedLimiter(t, cs, size)
			r := testRule(t, "r")
			for i := range 10 * size {
				key := "k" + strconv.Itoa(i)
				l.Allow(context.Background(), r, key)
				before := cs.count()
				l.Allow(context.Background(), r, key)
				if cs.count() != before {
					t.Fatalf("key %d: the newest denial was not cached", i)
				}
			}
			n := 0
			for i := range l.denials.shards {
				n += len(l.denials.shards[i].m)
			}
			if n > size {
				t.Fatalf("cache holds %d denials, size %d", n, size)
			}
		})
	}
}

func TestDenialCacheSizeMustNotBeNegative(t *testing.T) {
	if _, err := New(&countingStore{answer: deny}, Options{DenialCacheSize: -1}); err == nil {
		t.Fatal("New accepted a negative DenialCacheSize")
	}
}

// TestDenialCacheOffByDefault: without DenialCacheSize every check goes to
// the store.
func TestDenialCacheOffByDefault(t *testing.T) {
	cs := &countingStore{answer: deny}
	l, err := New(cs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.Allow(context.Background(), testRule(t, "r"), "k")
	}
	if n := cs.count(); n != 3 {
		t.Fatalf("%d store calls for 3 checks without a cache", n)
	}
}

// TestCachedDenialDoesNotAllocate: the attack path, a single-hit check
// answered by the cache, allocates nothing, whatever the store.
func TestCachedDenialDoesNotAllocate(t *testing.T) {
	l, _ := cachedLimiter(t, &countingStore{answer: deny}, 100)
	r := testRule(t, "r")
	ctx := context.Background()
	l.Allow(ctx, r, "k")
	if n := testing.AllocsPerRun(1000, func() { l.Allow(ctx, r, "k") }); n != 0 {
		t.Fatalf("%v allocations per cached denial, want 0", n)
	}
}
