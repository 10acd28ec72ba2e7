package bank

import (
	"context"
	"net/http"
	"runtime"
	"testing"
)

// When every password check is taken and the queue is full, a login is
// answered 503 with Retry-After at once, and its attempt is given back to
// the login limits: a busy server locks nobody out.
func TestBusyLoginsGet503AndKeepTheirAttempts(t *testing.T) {
	s := newTestServerWith(t, nil, func(c *Config) { c.LoginConcurrency, c.LoginQueue = 1, 0 })
	release, err := s.checks.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// More than the login limits allow (10 per IP, 5 per account): were
	// the attempts kept, the login after the release would be a 429.
	for i := range 12 {
		rec := loginFrom(s, "203.0.113.7", testDoc, "right")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != busyRetry {
			t.Fatalf("login %d with every check taken: %d, Retry-After %q; want 503 with Retry-After %s", i+1, rec.Code, rec.Header().Get("Retry-After"), busyRetry)
		}
	}
	release()
	if rec := loginFrom(s, "203.0.113.7", testDoc, "right"); rec.Code != http.StatusOK {
		t.Fatalf("login once a check is free: %d %s, want 200", rec.Code, rec.Body)
	}
}

// The gate lets n checks run, queues up to queue more, refuses the rest,
// and a queued check gets the first slot given back.
func TestGate(t *testing.T) {
	g := newGate(2, 1)
	ctx := context.Background()
	r1, err1 := g.enter(ctx)
	_, err2 := g.enter(ctx)
	if err1 != nil || err2 != nil {
		t.Fatalf("two slots: %v, %v", err1, err2)
	}
	got := make(chan error, 1)
	go func() {
		release, err := g.enter(ctx)
		if err == nil {
			release()
		}
		got <- err
	}()
	for g.queued.Load() == 0 {
		runtime.Gosched() // until the third check is queued
	}
	if _, err := g.enter(ctx); err != errBusy {
		t.Fatalf("fourth check with the queue full: %v, want errBusy", err)
	}
	r1()
	if err := <-got; err != nil {
		t.Fatalf("queued check: %v", err)
	}
	if _, err := g.enter(ctx); err != nil { // both slots taken again
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.enter(canceled); err != context.Canceled {
		t.Fatalf("queued check whose client left: %v, want context.Canceled", err)
	}
}
