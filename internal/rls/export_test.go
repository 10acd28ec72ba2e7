package rls

import (
	"context"
	"time"
)

// WithDebounce returns opts with the Watcher's quiet time before a reload
// set to d.
func WithDebounce(opts Options, d time.Duration) Options {
	opts.debounce = d
	return opts
}

// Bounds the tests check against, exported for them alone.
const (
	MaxDescriptors = maxDescriptors
	MaxEntries     = maxEntries
	MaxMessageSize = maxMessageSize
)

// Reload reads ConfigDir now, as a change to it would, and reports the
// outcome in the logs and metrics. It returns the refusal, if any; the
// configuration in force then stays. With a fixed Config it does nothing.
func (s *Server) Reload() error {
	if s.watcher == nil {
		return nil
	}
	err := s.watcher.Reload()
	s.reloaded(s.watcher.Config(), err)
	return err
}

// The bounds on what requests can make the service hold.
const (
	MaxGRPCRequestMemory = maxGRPCRequestMemory
	MaxJSONRequestMemory = maxJSONRequestMemory
)

// More bounds the tests check against.
const (
	LargeBudget        = largeBudget
	MaxStreamsInFlight = maxStreamsInFlight
	StreamReserve      = streamReserve
)

// TakeBudget takes n bytes of the large requests' budget, until release.
func (s *Server) TakeBudget(n int64) (release func()) {
	s.decoding.sem.Acquire(context.Background(), n)
	return func() { s.decoding.sem.Release(n) }
}

// BudgetFree reports whether the whole of the large requests' budget is
// free: no request holds any of it.
func (s *Server) BudgetFree() bool {
	if !s.decoding.sem.TryAcquire(largeBudget) {
		return false
	}
	s.decoding.sem.Release(largeBudget)
	return true
}

// StreamsInFlight returns the gRPC streams admitted.
func (s *Server) StreamsInFlight() int64 {
	return s.admission.shared.Load() + s.admission.reserve.Load()
}

// SetRequestTimeout sets how long a gRPC call's request may take to
// arrive after its headers.
func (s *Server) SetRequestTimeout(d time.Duration) { s.admission.requestTimeout.Store(int64(d)) }
