package breakerstore

import (
	"context"
	"errors"
	"fmt"
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
	// DefaultFailures is how many consecutive failures open the breaker.
	DefaultFailures = 5
	// DefaultCooldown is how long the breaker stays open before it probes.
	DefaultCooldown = 5 * time.Second
	// DefaultProbes is how many calls a half-open breaker lets through.
	DefaultProbes = 1
)

// ErrOpen is wrapped, together with [floodgate.ErrStoreUnavailable], by
// the error of every call that the breaker refused without calling the
// store.
var ErrOpen = errors.New("circuit breaker open")

// ErrInvalidOptions is wrapped by the errors of [Options.Validate] and
// [New].
var ErrInvalidOptions = errors.New("breakerstore: invalid options")

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Name names the breaker in OnStateChange; zero means "floodgate".
	Name string
	// Failures is how many consecutive failures open the breaker. Zero
	// means DefaultFailures (5).
	Failures uint32
	// Cooldown is how long the breaker stays open before it lets probes
	// through. Zero means DefaultCooldown (5s); negative is invalid.
	Cooldown time.Duration
	// Probes is how many calls a half-open breaker lets through; all must
	// succeed to close it. Zero means DefaultProbes (1).
	Probes uint32
	// OnStateChange, if set, is called on every transition, for a log line
	// or a metric. It runs synchronously while the breaker's lock is held:
	// it must return quickly and must not call the Store.
	OnStateChange func(name string, from, to State)
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
	next floodgate.Store
	cb   *gobreaker.CircuitBreaker[[]floodgate.Result]
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
	failures := orDefault(opts.Failures, DefaultFailures)
	st := gobreaker.Settings{
		Name:        opts.Name,
		MaxRequests: orDefault(opts.Probes, DefaultProbes),
		Timeout:     opts.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.As(err, new(excluded)) },
	}
	if st.Name == "" {
		st.Name = "floodgate"
	}
	if st.Timeout == 0 {
		st.Timeout = DefaultCooldown
	}
	if opts.OnStateChange != nil {
		st.OnStateChange = opts.OnStateChange
	}
	return &Store{next: next, cb: gobreaker.NewCircuitBreaker[[]floodgate.Result](st)}, nil
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
		res, err := call()
		if err != nil && isExcluded(ctx, err) {
			return nil, excluded{err}
		}
		return res, err
	})
	switch ex := (excluded{}); {
	case err == nil:
		return res, nil
	case errors.As(err, &ex):
		return nil, ex.err
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, fmt.Errorf("breakerstore: %w: %w", ErrOpen, floodgate.ErrStoreUnavailable)
	}
	return nil, err
}

// isExcluded reports whether err is the caller's doing rather than the
// store's: a cancellation (not a deadline), or a closed store.
func isExcluded(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, floodgate.ErrClosed), errors.Is(ctx.Err(), context.Canceled):
		return true
	}
	return errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Take implements [floodgate.Store].
func (s *Store) Take(ctx context.Context, id string, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.do(ctx, func() ([]floodgate.Result, error) { return s.next.Take(ctx, id, hits) })
}

// Peek implements [floodgate.Store].
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.do(ctx, func() ([]floodgate.Result, error) { return s.next.Peek(ctx, hits) })
}

// Refund implements [floodgate.Store].
func (s *Store) Refund(ctx context.Context, id string, receipts []floodgate.Receipt) error {
	_, err := s.do(ctx, func() ([]floodgate.Result, error) { return nil, s.next.Refund(ctx, id, receipts) })
	return err
}

// Reset implements [floodgate.Store].
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	_, err := s.do(ctx, func() ([]floodgate.Result, error) { return nil, s.next.Reset(ctx, rule, key) })
	return err
}
