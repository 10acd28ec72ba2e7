package httplimit

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Outcome is how the middleware decided a request.
type Outcome uint8

const (
	// Allowed: the store admitted the request.
	Allowed Outcome = iota
	// Denied: the store refused it; it got a 429.
	Denied
	// FailedOpen: the store failed and the route let the request through.
	FailedOpen
	// FailedClosed: the store failed and the route refused the request.
	FailedClosed
	// Local: the store failed and per-replica limits decided; see
	// Result.Decision.Allowed.
	Local
	// Skipped: no limit of the route enforced a decision: each skipped the
	// request for want of a key, or they are all shadow limits.
	Skipped

	outcomes = iota
)

var outcomeNames = [outcomes]string{"allowed", "denied", "failed_open", "failed_closed", "local", "skipped"}

// String returns the outcome's metric label: "allowed", "denied",
// "failed_open", "failed_closed", "local" or "skipped".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Result is the middleware's verdict on a request. The handler of an
// allowed request finds it with [FromContext].
type Result struct {
	// Outcome says who decided.
	Outcome Outcome
	// Decision is the limiter's decision when Outcome is Allowed, Denied or
	// Local, with one element of Decision.Each per limit checked; the zero
	// Decision otherwise.
	Decision floodgate.Decision
	// Shadow holds the decisions of the route's shadow limits (see
	// Limit.Shadow), for an allowed request; a denied one is not checked
	// against them.
	Shadow []floodgate.Decision

	limiter    *floodgate.Limiter // the limiter that decided; nil if none did
	hits       []floodgate.Hit    // what it decided
	shadowHits []floodgate.Hit    // the shadow limits' hits, checked on their own
	outer      *Result            // the verdict of the route this one is nested in, if any
	// storeRetry is, when the store failed, how long its circuit breaker
	// says it stays open (zero if unknown).
	storeRetry time.Duration
}

// allowed reports whether the request may proceed.
func (r Result) allowed() bool {
	switch r.Outcome {
	case Denied, FailedClosed:
		return false
	case Local:
		return r.Decision.Allowed
	}
	return true
}

type resultKey struct{}

// FromContext returns the verdict of the rate-limit middleware on the
// request whose context is ctx.
func FromContext(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(Result)
	return r, ok
}

// Refund undoes the hits that the decision recorded, through the limiter
// that recorded them (the store, or the local limits): all of them, or
// only those of the named policies. A handler calls it when a request
// turns out not to count, such as the account's attempt after a
// successful login. It is idempotent, and does nothing for a request that
// no limiter admitted (FailedOpen, Skipped).
//
// With nested middlewares, the Result covers every route of the request:
// Refund undoes the hits of the outer routes too.
func (r Result) Refund(ctx context.Context, policies ...string) error {
	var errs []error
	for o := &r; o != nil; o = o.outer {
		if o.limiter == nil || !o.Decision.Allowed {
			continue
		}
		if len(policies) == 0 {
			errs = append(errs, o.limiter.Refund(ctx, o.Decision))
			continue
		}
		for _, d := range each(o.Decision) {
			if slices.Contains(policies, d.Policy) {
				errs = append(errs, o.limiter.Refund(ctx, d))
			}
		}
	}
	return errors.Join(errs...)
}
