package breakerstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/sony/gobreaker/v2"
)

// State is the state of the breaker: [Closed], [HalfOpen] or [Open]. Its
// String method gives "closed", "half-open" and "open".
type State = gobreaker.State

// The states of the breaker.
const (
	// Closed: calls go to the store.
	Closed = gobreaker.StateClosed
	// HalfOpen: up to Options.Probes calls go to the store to test it; the
	// others fail fast.
	HalfOpen = gobreaker.StateHalfOpen
	// Open: every call fails fast without touching the store.
	Open = gobreaker.StateOpen
)

// Defaults of [Options].
const (
	// defaultFailures is how many consecutive failures open the breaker.
	defaultFailures = 5
	// defaultCooldown is how long the breaker stays open before it probes:
	// short, since it adds to a failover's unavailability up to its
	// length (a Sentinel failover took 5s with 5s, 2.3s without), while a
	// dead store costs one probe per cooldown.
	defaultCooldown = time.Second
	// defaultProbes is how many calls a half-open breaker lets through.
	defaultProbes = 1
)

// ErrOpen is wrapped, together with [floodgate.ErrStoreUnavailable], by
// the error of every call that the breaker refused without calling the
// store. That error also has a method RetryAfter() time.Duration: what is
// left of the cooldown of an open breaker, zero for a half-open one whose
// probes are in flight.
var ErrOpen = errors.New("circuit breaker open")

// openError is the error of a call that the breaker refused without calling
// the store. It wraps [ErrOpen] and [floodgate.ErrStoreUnavailable].
type openError struct {
	// RetryIn is the time until the breaker lets a probe through: what is
	// left of the cooldown of an open breaker, zero for a half-open one
	// whose probes are in flight.
	RetryIn time.Duration
}

// Error reports the breaker open and, if known, when it probes again.
func (e *openError) Error() string {
	if e.RetryIn > 0 {
		return fmt.Sprintf("breakerstore: %v (probes again in %v): %v", ErrOpen, e.RetryIn.Round(time.Millisecond), floodgate.ErrStoreUnavailable)
	}
	return fmt.Sprintf("breakerstore: %v: %v", ErrOpen, floodgate.ErrStoreUnavailable)
}

// Unwrap returns [ErrOpen] and [floodgate.ErrStoreUnavailable].
func (e *openError) Unwrap() []error { return []error{ErrOpen, floodgate.ErrStoreUnavailable} }

// RetryAfter returns RetryIn. An HTTP layer finds it with errors.As on an
// interface{ RetryAfter() time.Duration }, and tells clients when the
// store may be back.
func (e *openError) RetryAfter() time.Duration { return e.RetryIn }

// ErrInvalidOptions is wrapped by the errors of [Options.Validate] and
// [New].
var ErrInvalidOptions = errors.New("breakerstore: invalid options")

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Failures is how many consecutive failures open the breaker. Zero
	// means 5.
	Failures uint32
	// Cooldown is how long the breaker stays open before it lets probes
	// through. Zero means 1s; negative is invalid. It adds up to its
	// length to a failover's unavailability: the store is back, and the
	// breaker has not yet probed it.
	Cooldown time.Duration
	// Probes is how many calls a half-open breaker lets through; all must
	// succeed to close it. Zero means 1.
	Probes uint32
	// OnStateChange, if set, is called on every transition, for a log line
	// or a metric. It runs synchronously while the breaker's lock is held:
	// it must return quickly and must not call the Store.
	OnStateChange func(from, to State)
}

// Validate reports every problem with o, each wrapping [ErrInvalidOptions].
func (o Options) Validate() error {
	if o.Cooldown < 0 {
		return fmt.Errorf("%w: cooldown %v is negative", ErrInvalidOptions, o.Cooldown)
	}
	return nil
}

// Store is a [floodgate.Store] that calls another store through a circuit
// breaker. All its methods share one breaker. It is safe for concurrent
// use; it does not own the wrapped store (close that one yourself).
type Store struct {
	next     floodgate.Store
	cb       *gobreaker.CircuitBreaker[[]floodgate.Result]
	cooldown time.Duration
	openedAt atomic.Int64 // Unix nanoseconds of the last transition to Open
	clock    clock        // whose deadline a miss was (deadline.go)
}

var _ floodgate.Store = (*Store)(nil)

// New returns a breaker, closed, in front of next.
func New(next floodgate.Store, opts Options) (*Store, error) {
	if next == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	failures := orDefault(opts.Failures, defaultFailures)
	st := gobreaker.Settings{
		MaxRequests: orDefault(opts.Probes, defaultProbes),
		Timeout:     opts.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// Asked of every call, successes included: nil first, without
		// the allocation of errors.As's target.
		IsExcluded: func(err error) bool { return err != nil && errors.As(err, new(excluded)) },
	}
	if st.Timeout == 0 {
		st.Timeout = defaultCooldown
	}
	s := &Store{next: next, cooldown: st.Timeout}
	s.clock.init()
	st.OnStateChange = func(_ string, from, to State) {
		if to == Open {
			s.openedAt.Store(time.Now().UnixNano())
		}
		if opts.OnStateChange != nil {
			opts.OnStateChange(from, to)
		}
	}
	s.cb = gobreaker.NewCircuitBreaker[[]floodgate.Result](st)
	return s, nil
}

func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// State returns the breaker's state now. An open breaker whose cooldown is
// over reports HalfOpen.
func (s *Store) State() State { return s.cb.State() }

// excluded marks an error that says nothing about the store's health.
type excluded struct{ err error }

func (e excluded) Error() string { return e.err.Error() }

func (s *Store) do(ctx context.Context, call func() ([]floodgate.Result, error)) ([]floodgate.Result, error) {
	res, err := s.cb.Execute(func() ([]floodgate.Result, error) {
		c := s.clock.start(ctx)
		res, err := call()
		if err == nil || errors.Is(err, floodgate.ErrCorruptState) {
			s.clock.answered()
		}
		if err != nil && (isExcluded(ctx, err) || s.clock.notTheStores(ctx, c, err)) {
			return nil, excluded{err}
		}
		return res, err
	})
	if err == nil {
		return res, nil // first: errors.As's target would cost a success an allocation
	}
	switch ex := (excluded{}); {
	case errors.As(err, &ex):
		return nil, ex.err
	case errors.Is(err, gobreaker.ErrOpenState):
		return nil, &openError{RetryIn: s.retryIn()}
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, &openError{}
	}
	return nil, err
}

// retryIn returns what is left of an open breaker's cooldown.
func (s *Store) retryIn() time.Duration {
	left := s.cooldown - time.Since(time.Unix(0, s.openedAt.Load()))
	return min(max(left, 0), s.cooldown)
}

// isExcluded reports whether err is not the store's failure: a
// cancellation (not a deadline), a closed store, a bad call, or the state
// of one key (the store answered).
func isExcluded(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, floodgate.ErrClosed), errors.Is(err, floodgate.ErrCorruptState),
		errors.Is(err, floodgate.ErrInvalidHit), errors.Is(err, floodgate.ErrInvalidRule),
		errors.Is(ctx.Err(), context.Canceled):
		return true
	}
	return errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Take implements [floodgate.Store].
func (s *Store) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.do(ctx, func() ([]floodgate.Result, error) { return s.next.Take(ctx, hits) })
}

// Peek implements [floodgate.Store].
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.do(ctx, func() ([]floodgate.Result, error) { return s.next.Peek(ctx, hits) })
}

// Refund implements [floodgate.Store].
func (s *Store) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	_, err := s.do(ctx, func() ([]floodgate.Result, error) { return nil, s.next.Refund(ctx, receipts) })
	return err
}

// Renew implements [floodgate.Store].
func (s *Store) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	var stamps []floodgate.Stamp
	_, err := s.do(ctx, func() ([]floodgate.Result, error) {
		var err error
		stamps, err = s.next.Renew(ctx, receipts)
		return nil, err
	})
	if err != nil {
		return nil, err
	}
	return stamps, nil
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	_, err := s.do(ctx, func() ([]floodgate.Result, error) { return nil, s.next.Reset(ctx, rule, key) })
	return err
}
