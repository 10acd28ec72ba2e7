// Package faultstore wraps a [floodgate.Store] so that tests can make it
// fail or hang on demand, and count the calls that reach it.
package faultstore

import (
	"context"
	"errors"
	"fmt"
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
)

// ErrInjected is the error a failing store returns.
var ErrInjected = errors.New("injected failure")

// Store is a [floodgate.Store] whose behaviour a test switches with Set. It
// is safe for concurrent use.
type Store struct {
	next  floodgate.Store
	mode  atomic.Int32
	calls atomic.Int64
}

var _ floodgate.Store = (*Store)(nil)

// New returns a store that forwards to next until told otherwise.
func New(next floodgate.Store) *Store { return &Store{next: next} }

// Set switches the store to m for the calls that start from now on.
func (s *Store) Set(m Mode) { s.mode.Store(int32(m)) }

// Calls returns how many calls reached the store, in any mode.
func (s *Store) Calls() int64 { return s.calls.Load() }

func (s *Store) fault(ctx context.Context) error {
	s.calls.Add(1)
	switch Mode(s.mode.Load()) {
	case Fail:
		return fmt.Errorf("faultstore: %w", ErrInjected)
	case Hang:
		<-ctx.Done()
		return fmt.Errorf("faultstore: hung: %w", ctx.Err())
	}
	return nil
}

// Take implements [floodgate.Store].
func (s *Store) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.next.Take(ctx, hits)
}

// Peek implements [floodgate.Store].
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.next.Peek(ctx, hits)
}

// Refund implements [floodgate.Store].
func (s *Store) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	if err := s.fault(ctx); err != nil {
		return err
	}
	return s.next.Refund(ctx, receipts)
}

// Renew implements [floodgate.Store].
func (s *Store) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.next.Renew(ctx, receipts)
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if err := s.fault(ctx); err != nil {
		return err
	}
	return s.next.Reset(ctx, rule, key)
}
