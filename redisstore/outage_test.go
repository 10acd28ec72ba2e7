package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/burst"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// eventually calls f until it succeeds or the deadline passes.
func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func budget(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestStartDuringOutage builds a store while nothing listens at its
// address, then brings Redis up there.
func TestStartDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	start := time.Now()
	s, err := New(ctx(t), Options{URL: srv.URL(), Prefix: randomPrefix()})
	if err != nil {
		t.Fatalf("New with Redis down: %v; a store must build during an outage", err)
	}
	defer s.Close()
	hits := []floodgate.Hit{{Rule: mustRule(t, "outage", 10, time.Minute, floodgate.SlidingWindow), Key: "k", Cost: 1}}
	for range 5 {
		c, cancel := budget(50 * time.Millisecond)
		_, err := s.Take(c, hits)
		cancel()
		if !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("Take with Redis down: %v; want an error wrapping ErrStoreUnavailable", err)
		}
	}
	if err := s.Ping(ctx(t)); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Ping with Redis down: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("New and 5 failing calls took %v; a down Redis must fail fast", d)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		c, cancel := budget(time.Second)
		defer cancel()
		_, err := s.Take(c, hits)
		return err
	})
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestDialIsRateLimited checks that calls between two connection attempts
// fail at once instead of dialing again.
func TestDialIsRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	s, err := New(ctx(t), Options{URL: srv.URL(), redialInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Redis is up, but the failed attempt of New is within the interval.
	if err := s.Ping(ctx(t)); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Ping within the redial interval: %v; want a fast failure", err)
	}
}

// TestKilledRedisRecovers kills and restarts Redis under a connected
// store.
func TestKilledRedisRecovers(t *testing.T) {
	srv := redistest.Start(t)
	s := newStoreOn(t, srv.Addr())
	hits := []floodgate.Hit{{Rule: mustRule(t, "killed", 10, time.Minute, floodgate.TokenBucket), Key: "k", Cost: 1}}
	if _, err := s.Take(ctx(t), hits); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	start := time.Now()
	c, cancel := budget(50 * time.Millisecond)
	_, err := s.Take(c, hits)
	cancel()
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Take after kill: %v; want ErrStoreUnavailable", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Take after kill took %v, beyond its 50ms budget", d)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		c, cancel := budget(time.Second)
		defer cancel()
		_, err := s.Take(c, hits)
		return err
	})
}

// TestFrozenRedisRespectsTheBudget freezes Redis (SIGSTOP): commands go
// unanswered, and every call must still return within its context.
func TestFrozenRedisRespectsTheBudget(t *testing.T) {
	srv := redistest.Start(t)
	s := newStoreOn(t, srv.Addr())
	l, err := floodgate.New(s, floodgate.Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := mustRule(t, "frozen", 10, time.Minute, floodgate.SlidingWindow)
	if _, err := l.Allow(context.Background(), r, "k"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		start := time.Now()
		_, err := l.Allow(context.Background(), r, "k")
		d := time.Since(start)
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d to a frozen Redis: %v; want ErrStoreUnavailable and DeadlineExceeded", i+1, err)
		}
		if d > 300*time.Millisecond {
			t.Fatalf("call %d to a frozen Redis took %v; the budget is 50ms", i+1, d)
		}
	}
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		_, err := l.Allow(context.Background(), r, "k")
		return err
	})
}

// TestNoCallWaitsForever kills Redis under a connected store and calls
// every method without a deadline: each must give up after callTimeout
// (rueidis would retry the read-only ones until their context is done).
func TestNoCallWaitsForever(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(ctx(t), Options{URL: srv.URL(), Prefix: randomPrefix(), callTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustRule(t, "forever", 10, time.Minute, floodgate.SlidingWindow)
	hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, kill := range []func(){srv.Kill, func() { _ = srv.Restart(); _ = srv.Stop() }} {
		kill()
		bg := context.Background()
		for name, f := range map[string]func() error{
			"Ping":   func() error { return s.Ping(bg) },
			"Peek":   func() error { _, err := s.Peek(bg, hits); return err },
			"Take":   func() error { _, err := s.Take(bg, hits); return err },
			"Refund": func() error { return s.Refund(bg, receipts(hits, nil)) },
			"Reset":  func() error { return s.Reset(bg, r, "k") },
		} {
			start := time.Now()
			err := f()
			if d := time.Since(start); d > time.Second {
				t.Errorf("%s on a dead Redis took %v; callTimeout is 200ms", name, d)
			}
			if !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Errorf("%s on a dead Redis: %v; want ErrStoreUnavailable", name, err)
			}
		}
	}
}

// TestConcurrentFirstUse has many goroutines wait for the store's first
// connection at once.
func TestConcurrentFirstUse(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel() // New does not wait for the connection
	s, err := New(canceled, Options{URL: "redis://" + redistest.Addr(t), Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	burst.Run(t, 50, func(int) error { return s.Ping(ctx(t)) })
}

// TestCloseDuringDial closes a store while its first connection attempt
// is in flight.
func TestCloseDuringDial(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := New(canceled, Options{URL: "redis://" + redistest.Addr(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx(t)); !errors.Is(err, floodgate.ErrClosed) {
		t.Fatalf("Ping after Close: %v; want ErrClosed", err)
	}
	if r := s.dialed.client.Load(); r != nil {
		if err := r.c.Do(ctx(t), r.c.B().Ping().Build()).Error(); err == nil {
			t.Fatal("the client dialed during Close is still open")
		}
	}
}
