// Package faultstore wraps a [floodgate.Store] so that tests can make it
// fail or hang on demand, and count (or record) the calls that reach it.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
)

// Mode is how the store answers.
type Mode int32

const (
	// Pass forwards every call to the wrapped store.
	Pass Mode = iota
	// Fail answers every call at once with an error wrapping ErrInjected.
	Fail
	// Hang blocks every call until its context is done, as a frozen Redis
	// does, and returns the context's error.
	Hang
	// FailPeeks answers every Peek as Fail does and passes the rest.
	FailPeeks
)

// ErrInjected is the error a failing store returns.
var ErrInjected = errors.New("injected failure")

// Store is a [floodgate.Store] whose behaviour a test switches with Set. It
// is safe for concurrent use.
type Store struct {
	next  floodgate.Store
	mode  atomic.Int32
	calls atomic.Int64

	mu        sync.Mutex
	recording bool   // guarded by mu
	log       []Call // guarded by mu: the Takes and Peeks since Record
}

// Call is a Take or Peek that reached the store while it recorded: its
// hits, and the results the wrapped store answered (nil if it failed or
// was not asked).
type Call struct {
	Peek    bool
	Hits    []floodgate.Hit
	Results []floodgate.Result
}

// Record starts keeping the Takes and Peeks that reach the store, from
// none: a test reads them with Recorded.
func (s *Store) Record() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recording, s.log = true, nil
}

// Recorded returns the Takes and Peeks since Record, in order.
func (s *Store) Recorded() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// keep records a Take or Peek when the store records them.
func (s *Store) keep(peek bool, hits []floodgate.Hit, results []floodgate.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recording {
		s.log = append(s.log, Call{Peek: peek, Hits: slices.Clone(hits), Results: slices.Clone(results)})
	}
}

var _ floodgate.Store = (*Store)(nil)

// New returns a store that forwards to next until told otherwise.
func New(next floodgate.Store) *Store { return &Store{next: next} }

// Set switches the store to m for the calls that start from now on.
func (s *Store) Set(m Mode) { s.mode.Store(int32(m)) }

// Calls returns how many calls reached the store, in any mode.
func (s *Store) Calls() int64 { return s.calls.Load() }

func (s *Store) fault(ctx context.Context, peek bool) error {
	s.calls.Add(1)
	switch m := Mode(s.mode.Load()); {
	case m == Fail, m == FailPeeks && peek:
		return fmt.Errorf("faultstore: %w", ErrInjected)
	case m == Hang:
		<-ctx.Done()
		return fmt.Errorf("faultstore: hung: %w", ctx.Err())
	}
	return nil
}

// Take implements [floodgate.Store].
func (s *Store) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.fault(ctx, false); err != nil {
		s.keep(false, hits, nil)
		return nil, err
	}
	rs, err := s.next.Take(ctx, hits)
	s.keep(false, hits, rs)
	return rs, err
}

// Peek implements [floodgate.Store].
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.fault(ctx, true); err != nil {
		s.keep(true, hits, nil)
		return nil, err
	}
	rs, err := s.next.Peek(ctx, hits)
	s.keep(true, hits, rs)
	return rs, err
}

// Refund implements [floodgate.Store].
func (s *Store) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	if err := s.fault(ctx, false); err != nil {
		return err
	}
	return s.next.Refund(ctx, receipts)
}

// Renew implements [floodgate.Store].
func (s *Store) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	if err := s.fault(ctx, false); err != nil {
		return nil, err
	}
	return s.next.Renew(ctx, receipts)
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if err := s.fault(ctx, false); err != nil {
		return err
	}
	return s.next.Reset(ctx, rule, key)
}
