package enforce

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fields"
)

// Outcome is how a check was decided.
type Outcome uint8

const (
	// Allowed: the store admitted the request.
	Allowed Outcome = iota
	// Denied: the store refused it, or Check did without asking (an
	// enforced hit that can never be admitted: DenyOversize).
	Denied
	// FailedOpen: the store failed and the request went through.
	FailedOpen
	// FailedClosed: the store failed and the request was refused.
	FailedClosed
	// Local: the store failed and per-replica limits decided; see
	// Result.Decision.Allowed.
	Local
	// Skipped: no limit enforced a decision: each skipped the request for
	// want of a key, or they are all shadow limits. A request of shadow
	// limits only that the store failed to decide is Skipped with Err
	// set, and counted and logged as failed_open: it went through because
	// the store failed.
	Skipped
	// Errored: the store failed and a hit's failure mode is FailError:
	// nothing was decided, and the caller answers with an error (the RLS
	// service's Unavailable, which Envoy lets through by default). It is
	// not fail-closed: the request may well have gone through.
	Errored

	outcomes = iota
)

var outcomeNames = [outcomes]string{"allowed", "denied", "failed_open", "failed_closed", "local", "skipped", "error"}

// String returns the outcome's metric label: "allowed", "denied",
// "failed_open", "failed_closed", "local", "skipped" or "error".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Result is the verdict of a [Gate] on a request.
type Result struct {
	// Outcome says who decided.
	Outcome Outcome
	// Decision is the limiter's decision when Outcome is Allowed, Denied or
	// Local, with one element of Decision.Each per enforced hit decided;
	// the zero Decision otherwise. A Local decision covers the hits whose
	// failure mode is FailLocal. It is the decision on the enforced
	// takes, when the request has any and was not denied before they
	// were asked; otherwise the worst of the enforced hits' verdicts
	// (each in its Each, when there are several).
	Decision floodgate.Decision
	// Shadow holds the decisions of the shadow hits, each checked on its
	// own, for a request that the enforced hits admitted from the store
	// (or that had none); a denied one is not checked against them, nor
	// one that a failure mode decided (the store just failed: each shadow
	// hit would wait out its own budget).
	Shadow []floodgate.Decision
	// Err is the store's error when it failed to decide (Outcome
	// FailedOpen, FailedClosed, Local or Errored, or Skipped for shadow
	// hits only); nil otherwise.
	Err error
	// Each holds the verdict on every hit given to [Gate.Check], in
	// order: the rule in force for its key, and its own decision, final.
	// A transport reports these as they are.
	Each []Verdict

	gate    *Gate              // the gate that decided, with limiter
	limiter *floodgate.Limiter // the limiter that decided the enforced takes; nil if none did
}

// Allowed reports whether the request may proceed. The Result that Check
// returns with an error is FailedClosed: it reports false.
func (r Result) Allowed() bool {
	switch r.Outcome {
	case Denied, FailedClosed, Errored:
		return false
	case Local:
		return r.Decision.Allowed
	}
	return true
}

// FailRetryAfter is how long a client refused because the store failed
// should wait: 5s, or the remaining open time of the
// store's circuit breaker if that is longer. The breaker's time is found
// on Err's chain through a RetryAfter() time.Duration method, as a
// breakerstore's open breaker's error has.
func (r Result) FailRetryAfter() time.Duration {
	var open interface{ RetryAfter() time.Duration }
	if errors.As(r.Err, &open) {
		return max(minFailRetryAfter, open.RetryAfter())
	}
	return minFailRetryAfter
}

// Refund undoes the hits that the decision recorded, through the limiter
// that recorded them (the store, or the local limits): all of them, or
// only those of the named policies. A caller undoes a request that turns
// out not to count, such as the account's attempt after a successful
// login. It is idempotent, and does nothing for a request whose hits no
// limiter recorded (Denied, but for Overdraw hits, FailedOpen,
// FailedClosed, Skipped). Shadow hits are not refunded, nor leases
// (floodgate.Concurrency hits): the request holds its slots until it ends
// ([Result.Hold]).
func (r Result) Refund(ctx context.Context, policies ...string) error {
	if r.limiter == nil || !r.Decision.Recorded {
		return nil
	}
	lease := func(v Verdict) bool { return v.Hit.Rule.Algorithm == floodgate.Concurrency }
	if len(policies) == 0 && !slices.ContainsFunc(r.Each, lease) {
		return r.limiter.Refund(ctx, r.Decision)
	}
	var errs []error
	for _, v := range r.Each {
		if v.cls&enforcedTake == 0 || !v.decided() || lease(v) {
			continue
		}
		if len(policies) == 0 || slices.Contains(policies, v.Decision.Policy) {
			errs = append(errs, r.limiter.Refund(ctx, v.Decision))
		}
	}
	return errors.Join(errs...)
}

// Settle settles the hit of the named policy, taken with an estimated
// cost, against the actual cost known once the work is done (see
// floodgate.Limiter.Settle): an overrun is charged past the limit, an
// underrun refunded. It does nothing for a policy the check did not
// record. It returns what floodgate.Limiter.Settle returns: the charge's
// decision, or the hit's own when nothing was charged (an underrun's
// refund is not in its figures: the next decision shows it).
func (r Result) Settle(ctx context.Context, policy string, actual int64) (floodgate.Decision, error) {
	if r.limiter == nil || !r.Decision.Recorded {
		return floodgate.Decision{}, nil
	}
	for _, d := range fields.Each(r.Decision) {
		if d.Policy == policy {
			return r.limiter.Settle(ctx, d, actual)
		}
	}
	return floodgate.Decision{}, nil
}
