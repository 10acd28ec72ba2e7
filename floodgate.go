package floodgate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// DefaultTimeout is the time budget of one decision when
// [Options.Timeout] is zero.
const DefaultTimeout = 50 * time.Millisecond

// Options configures a [Limiter]. The zero value is ready to use.
type Options struct {
	// Timeout is the time budget of one call to the store. A store that
	// does not answer in time yields an error wrapping ErrStoreUnavailable
	// and context.DeadlineExceeded. Zero means DefaultTimeout; negative
	// means no budget beyond the caller's context.
	Timeout time.Duration
}

// Limiter checks hits against a [Store]. It is safe for concurrent use; one
// Limiter per process, shared by all routes, is the common setup. Replicas
// that share a store (Redis) enforce their limits together.
//
// Most callers use [Limiter.Allow]; [Limiter.Check] checks several keys at
// once (login by IP and by account), all-or-nothing.
type Limiter struct {
	store   Store
	timeout time.Duration
	idBase  string        // random per Limiter, so ids of replicas never collide
	seq     atomic.Uint64 // makes every id of this Limiter unique
}

// New returns a limiter that keeps its state in store.
func New(store Store, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("floodgate: New: store is nil")
	}
	var seed [9]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
	l := &Limiter{store: store, timeout: opts.Timeout, idBase: base64.RawURLEncoding.EncodeToString(seed[:])}
	if l.timeout == 0 {
		l.timeout = DefaultTimeout
	}
	return l, nil
}

// Allow checks one request of key under rule and records it if allowed.
func (l *Limiter) Allow(ctx context.Context, rule Rule, key string) (Decision, error) {
	return l.Check(ctx, Hit{Rule: rule, Key: key})
}

// AllowN is like Allow for a request that costs n.
func (l *Limiter) AllowN(ctx context.Context, rule Rule, key string, n int64) (Decision, error) {
	return l.Check(ctx, Hit{Rule: rule, Key: key, Cost: n})
}

// Check checks every hit and records them all only if every one is within
// its limit: all-or-nothing. The decision describes the worst hit and lists
// each in Decision.Each.
func (l *Limiter) Check(ctx context.Context, hits ...Hit) (Decision, error) {
	if err := validate(hits); err != nil {
		return Decision{}, err
	}
	id := l.idBase + strconv.FormatUint(l.seq.Add(1), 36)
	ctx, cancel := l.budget(ctx)
	defer cancel()
	results, err := l.store.Take(ctx, id, hits)
	if err != nil {
		return Decision{}, storeError("take", err)
	}
	if len(results) != len(hits) {
		return Decision{}, storeError("take", fmt.Errorf("store returned %d results for %d hits", len(results), len(hits)))
	}
	return decide(id, hits, results), nil
}

// Peek reports what Check would decide now, recording nothing.
func (l *Limiter) Peek(ctx context.Context, hits ...Hit) (Decision, error) {
	if err := validate(hits); err != nil {
		return Decision{}, err
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	results, err := l.store.Peek(ctx, hits)
	if err != nil {
		return Decision{}, storeError("peek", err)
	}
	if len(results) != len(hits) {
		return Decision{}, storeError("peek", fmt.Errorf("store returned %d results for %d hits", len(results), len(hits)))
	}
	return decide("", hits, results), nil
}

// Refund undoes what an allowed decision recorded, for example the
// account's login attempt once the password proved right. Passing one
// element of Decision.Each undoes only that hit. Refund is idempotent, and
// a denied decision (which recorded nothing) is a no-op.
func (l *Limiter) Refund(ctx context.Context, d Decision) error {
	if !d.Allowed || d.ticket.id == "" {
		return nil
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	if err := l.store.Refund(ctx, d.ticket.id, d.ticket.hits); err != nil {
		return storeError("refund", err)
	}
	return nil
}

// Reset forgets everything recorded for key under rule: an administrator's
// unlock.
func (l *Limiter) Reset(ctx context.Context, rule Rule, key string) error {
	if err := validate([]Hit{{Rule: rule, Key: key}}); err != nil {
		return err
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	if err := l.store.Reset(ctx, rule, key); err != nil {
		return storeError("reset", err)
	}
	return nil
}

// Wait is Check that slows down before it rejects: while the hits are
// denied with a RetryAfter of at most maxDelay, it waits that long and
// checks again. It returns the first allowed decision, a denial whose
// RetryAfter exceeds maxDelay, or ctx's error as soon as ctx is done.
func (l *Limiter) Wait(ctx context.Context, maxDelay time.Duration, hits ...Hit) (Decision, error) {
	for {
		d, err := l.Check(ctx, hits...)
		if err != nil || d.Allowed || d.RetryAfter > maxDelay {
			return d, err
		}
		t := time.NewTimer(d.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return d, fmt.Errorf("floodgate: wait: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (l *Limiter) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}

func storeError(op string, err error) error {
	if errors.Is(err, ErrStoreUnavailable) {
		return fmt.Errorf("floodgate: %s: %w", op, err)
	}
	return fmt.Errorf("floodgate: %s: %w: %w", op, ErrStoreUnavailable, err)
}

func validate(hits []Hit) error {
	if len(hits) == 0 {
		return fmt.Errorf("%w: no hits to check", ErrInvalidHit)
	}
	var errs []error
	for i, h := range hits {
		if err := h.Rule.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("hit %d: %w", i, err))
			continue
		}
		switch {
		case h.Key == "":
			errs = append(errs, fmt.Errorf("%w: hit %d (%s): key is empty", ErrInvalidHit, i, h.Rule.Name))
		case len(h.Key) > MaxKeyLen:
			errs = append(errs, fmt.Errorf("%w: hit %d (%s): key is %d bytes, at most %d allowed", ErrInvalidHit, i, h.Rule.Name, len(h.Key), MaxKeyLen))
		}
		for j := range i {
			if hits[j].Rule.Name == h.Rule.Name && hits[j].Key == h.Key {
				errs = append(errs, fmt.Errorf("%w: hits %d and %d both name key %q under rule %s; use one hit with Cost", ErrInvalidHit, j, i, truncate(h.Key), h.Rule.Name))
			}
		}
		switch c := h.cost(); {
		case c < 1:
			errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d is below 1", ErrInvalidHit, i, h.Rule.Name, h.Cost))
		case c > h.Rule.Capacity():
			errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d exceeds the rule's capacity %d, so it could never be allowed", ErrInvalidHit, i, h.Rule.Name, c, h.Rule.Capacity()))
		}
	}
	return errors.Join(errs...)
}

// truncate shortens a key for an error message.
func truncate(key string) string {
	if len(key) > 32 {
		return key[:32] + "..."
	}
	return key
}
