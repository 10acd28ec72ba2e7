package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/memstore"
)

// slowStore answers every call of a key after the latency set for it (none
// by default), as a store whose round trip takes that long, or when the
// call's context is done, whichever comes first. Entered counts the calls
// that reached it.
type slowStore struct {
	next    floodgate.Store
	mu      sync.Mutex
	latency map[string]time.Duration // by hit key
	entered atomic.Int64
}

func newSlowStore(t *testing.T) *slowStore {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	return &slowStore{next: ms, latency: map[string]time.Duration{}}
}

// set makes the calls of key that start from now on take d.
func (s *slowStore) set(key string, d time.Duration) {
	s.mu.Lock()
	s.latency[key] = d
	s.mu.Unlock()
}

func (s *slowStore) wait(ctx context.Context, key string) error {
	s.entered.Add(1)
	s.mu.Lock()
	d := s.latency[key]
	s.mu.Unlock()
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slowstore: %w", ctx.Err())
	}
}

func (s *slowStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.wait(ctx, hits[0].Key); err != nil {
		return nil, err
	}
	return s.next.Take(ctx, hits)
}

func (s *slowStore) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.wait(ctx, hits[0].Key); err != nil {
		return nil, err
	}
	return s.next.Peek(ctx, hits)
}

func (s *slowStore) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	if err := s.wait(ctx, receipts[0].Hit.Key); err != nil {
		return err
	}
	return s.next.Refund(ctx, receipts)
}

func (s *slowStore) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	if err := s.wait(ctx, receipts[0].Hit.Key); err != nil {
		return nil, err
	}
	return s.next.Renew(ctx, receipts)
}

func (s *slowStore) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if err := s.wait(ctx, key); err != nil {
		return err
	}
	return s.next.Reset(ctx, rule, key)
}

// slowFixture is a Limiter with a budget of 20ms on a breaker (2 failures
// open it) on a slowStore, on a CPU that is never short.
type slowFixture struct {
	store   *slowStore
	breaker *breakerstore.Store
	limiter *floodgate.Limiter
	rule    floodgate.Rule
}

const budget = 20 * time.Millisecond

func newSlowFixture(t *testing.T) *slowFixture {
	t.Helper()
	f := &slowFixture{store: newSlowStore(t)}
	var err error
	if f.breaker, err = breakerstore.New(f.store, breakerstore.Options{Failures: 2, Cooldown: time.Hour}); err != nil {
		t.Fatal(err)
	}
	idleCPU(f.breaker)
	if f.limiter, err = floodgate.New(f.breaker, floodgate.Options{Timeout: budget}); err != nil {
		t.Fatal(err)
	}
	if f.rule, err = floodgate.NewRule("r", bounds.DefaultLog, time.Minute, floodgate.SlidingWindow); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *slowFixture) allow(ctx context.Context, key string) error {
	_, err := f.limiter.Allow(ctx, f.rule, key)
	return err
}

// A store that answers in a fraction of the budget is not slow because
// its callers came with their deadlines spent (a request that waited for
// its body, a gRPC deadline eaten upstream): those misses are the
// callers'. The store is blamed only for a deadline it was given in full,
// and then it is, however many spent callers come in between.
func TestCallersWithSpentDeadlinesDoNotOpen(t *testing.T) {
	f := newSlowFixture(t)
	if err := f.allow(context.Background(), "k"); err != nil { // a full budget
		t.Fatal(err)
	}
	f.store.set("k", 2*time.Millisecond) // a tenth of the budget
	for i := range 10 {
		left := time.Millisecond
		if i%2 == 1 {
			left = -time.Second // spent before the call
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		err := f.allow(ctx, "k")
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d with %v left: %v, want a deadline exceeded or a decision", i+1, left, err)
		}
	}
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after 10 callers that came with at most 1ms of a 20ms budget to a store that answers in 2ms, want closed", got)
	}

	// Slower than the budget: calls given the whole budget open it.
	f.store.set("k", time.Hour)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = f.allow(ctx, "k") // spent: not counted
		cancel()
		if err := f.allow(context.Background(), "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a deadline exceeded", err)
		}
	}
	if got := f.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v after 2 full budgets missed by a store that answers in an hour, want open", got)
	}
}

// Deadlines missed while the store answered other calls are not the
// store's: it was answering. A flood of huge requests whose own calls miss
// (their scripts are long, or this process is too busy to send them and
// read their replies in time) must not open the breaker for the requests
// that the store still serves.
func TestMissesWhileTheStoreAnswersDoNotOpen(t *testing.T) {
	f := newSlowFixture(t)
	f.store.set("huge", time.Hour)
	for round := range 3 {
		entered := f.store.entered.Load()
		errs := make(chan error, 4)
		for range 4 { // twice the threshold, at once
			go func() { errs <- f.allow(context.Background(), "huge") }()
		}
		for f.store.entered.Load() < entered+4 {
			time.Sleep(100 * time.Microsecond)
		}
		if err := f.allow(context.Background(), "small"); err != nil {
			t.Fatalf("round %d: a small request: %v", round+1, err)
		}
		for range 4 {
			if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: a huge request: %v, want a deadline exceeded", round+1, err)
			}
		}
		if got := f.breaker.State(); got != breakerstore.Closed {
			t.Fatalf("round %d: breaker %v after 4 misses during which the store answered another call, want closed", round+1, got)
		}
	}

	// Nothing answered meanwhile: the same misses open it.
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- f.allow(context.Background(), "huge") }()
	}
	for range 4 {
		<-errs
	}
	if got := f.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v after 4 misses with no answer, want open", got)
	}
}

// A flood that takes this process's CPU (huge requests to parse, bcrypt)
// makes calls miss their deadline while the store answers in time: the
// run queues of the Go scheduler are long. Such misses are not the
// store's, whether the queues were long when the call started (the flood
// ends while it waits) or only when it missed (the flood begins); a miss
// with short queues at both ends is.
func TestMissesOnAShortCPUDoNotOpen(t *testing.T) {
	for _, tc := range []struct {
		name        string
		start, miss int // goroutines in the run queues
		open        bool
	}{
		{"long at the start and at the miss", 1 << 20, 1 << 20, false},
		{"long at the start only: the flood ended", 1 << 20, 0, false},
		{"long at the miss only: the flood began", 0, 1 << 20, false},
		{"short at both", 0, 0, true},
		{"some queued, fewer than the Ps", runtime.GOMAXPROCS(0) - 1, runtime.GOMAXPROCS(0) - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSlowFixture(t)
			var queued atomic.Int64
			breakerstore.SetRunnable(f.breaker, func() int { return int(queued.Load()) })
			f.store.set("k", time.Hour)
			for i := range 4 {
				queued.Store(int64(tc.start))
				entered := f.store.entered.Load()
				done := make(chan error, 1)
				go func() { done <- f.allow(context.Background(), "k") }()
				for f.store.entered.Load() == entered && f.breaker.State() == breakerstore.Closed {
					time.Sleep(100 * time.Microsecond)
				}
				queued.Store(int64(tc.miss))
				if err := <-done; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, breakerstore.ErrOpen) {
					t.Fatalf("call %d: %v, want a deadline exceeded or the breaker open", i+1, err)
				}
			}
			if got, want := f.breaker.State(), map[bool]breakerstore.State{true: breakerstore.Open, false: breakerstore.Closed}[tc.open]; got != want {
				t.Fatalf("breaker %v after 4 misses, want %v", got, want)
			}
		})
	}
}
