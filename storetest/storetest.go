// Package storetest is the conformance suite that every [floodgate.Store]
// must pass. A store's own tests call [Run] (for a store on a real clock,
// such as Redis) or [RunFakeClock] (for a store whose clock the test can
// move, such as memstore); each case runs in a parallel subtest with a
// fresh store from newStore and random keys, and its failure message names
// the rule of the contract that broke.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// FakeClock is a clock that moves only when told. Pass its Now to the
// store under test. It is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewFakeClock returns a clock set to an arbitrary fixed instant.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Run runs the suite against stores that read a real clock. Durations the
// store reports are checked within 80ms, so that a loaded machine or the
// race detector does not fail an exact store, and cases that need time to
// pass sleep (their windows are one second long).
func Run(t *testing.T, newStore func(t *testing.T) floodgate.Store) {
	run(t, func(t *testing.T) env {
		return env{store: newStore(t), sleep: time.Sleep, tol: 80 * time.Millisecond, unit: 250 * time.Millisecond}
	})
}

// RunFakeClock runs the suite against stores whose time comes from clock:
// every reported duration must be exact to the nanosecond.
func RunFakeClock(t *testing.T, newStore func(t *testing.T, clock *FakeClock) floodgate.Store) {
	run(t, func(t *testing.T) env {
		c := NewFakeClock()
		return env{store: newStore(t, c), sleep: c.Advance, unit: time.Second}
	})
}

// env is what one case runs against.
type env struct {
	store floodgate.Store
	sleep func(time.Duration) // lets time pass on the store's clock
	tol   time.Duration       // tolerance of reported durations
	unit  time.Duration       // a time step: windows are a few units long
}

type testCase struct {
	name string
	run  func(t *testing.T, e env, l *floodgate.Limiter)
}

func run(t *testing.T, newEnv func(t *testing.T) env) {
	for _, tc := range slices.Concat(cases, sequences, overdrawCases, leaseCases, takeCases, escrowCases) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l, err := floodgate.New(e.store, floodgate.Options{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			tc.run(t, e, l)
		})
	}
}

// key returns a random key, so that cases never share state even on a
// shared server.
func key(t *testing.T) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return t.Name() + "-" + hex.EncodeToString(b[:])
}

func rule(t *testing.T, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func check(t *testing.T, l *floodgate.Limiter, hits ...floodgate.Hit) floodgate.Decision {
	t.Helper()
	d, err := l.Check(context.Background(), hits...)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return d
}

func peek(t *testing.T, l *floodgate.Limiter, hits ...floodgate.Hit) floodgate.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), hits...)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return d
}

// near reports whether got is within tol of want.
func near(got, want, tol time.Duration) bool {
	return got >= want-tol && got <= want+tol
}

var algorithms = []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter}
