package httplimit

import (
	"context"
	"errors"
	"slices"

	"github.com/floodgate-rl/floodgate/enforce"
)

// Result is the middleware's verdict on a request. The handler of an
// allowed request, and the [Route.Deny] of a denied one, find it with
// [FromContext]. Its Outcome, Decision and
// Shadow are those of the enforcement layer's verdict (enforce.Result);
// with nested middlewares, they and the methods promoted from
// enforce.Result (Settle) describe the innermost route that
// enforced a limit, while [Result.Refund] covers every route of the
// request.
type Result struct {
	enforce.Result

	outer  *Result          // the verdict of the route this one is nested in, if any
	also   []enforce.Result // shadow checks of nested routes that enforced nothing
	opaque bool             // an opaque route covers the request: its answers carry no rate-limit fields
}

// covers reports whether any route of the request, this one or one it is
// nested in, counted a hit of the rule named rule on key, enforced or
// shadow: a limiter decided it.
func (r Result) covers(rule, key string) bool {
	counted := func(res enforce.Result) bool {
		return slices.ContainsFunc(res.Each, func(v enforce.Verdict) bool {
			return v.Decision.Policy != "" && v.Hit.Rule.Name == rule && v.Hit.Key == key
		})
	}
	for o := &r; o != nil; o = o.outer {
		if counted(o.Result) || slices.ContainsFunc(o.also, counted) {
			return true
		}
	}
	return false
}

type resultKey struct{}

// FromContext returns the verdict of the rate-limit middleware on the
// request whose context is ctx: in the handler of an allowed request, and
// in the [Route.Deny] of a denied one.
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
		errs = append(errs, o.Result.Refund(ctx, policies...))
	}
	return errors.Join(errs...)
}
