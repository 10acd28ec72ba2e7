package grpclimit

import (
	"context"

	"github.com/floodgate-rl/floodgate/enforce"
)

type resultKey struct{}

// FromContext returns the verdict on the call whose handler context is
// ctx: the unary handler's ctx, or a stream handler's stream.Context().
// The handler of an allowed call may undo its hits with
// enforce.Result.Refund (the account's login attempt once the password
// proved right). It reports false for a method that no limit covers.
func FromContext(ctx context.Context) (enforce.Result, bool) {
	r, ok := ctx.Value(resultKey{}).(enforce.Result)
	return r, ok
}
