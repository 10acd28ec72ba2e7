// Package pace holds the one loop that slows a request down before it
// rejects it: floodgate.Limiter.Wait's and enforce's throttle.
package pace

import (
	"context"
	"time"
)

// Loop waits while next, given what is left of the budget, asks it to,
// and then calls again. The budget is maxDelay in all, ending no later
// than ctx's deadline: the first wait may take all of it (a RetryAfter of
// exactly maxDelay is waited for), each later one what is left, so the
// waits never add up to more than maxDelay, and nothing is waited for
// that would come after the caller stopped listening.
//
// next reports how long to wait (at least a millisecond is waited, so
// that a denial with no RetryAfter cannot spin) and a channel that ends
// the wait sooner when ready (nil for none); ok false ends the loop.
// again asks once more, and records its answer for next to see. Loop
// returns ctx's error as soon as ctx is done during a wait, else nil.
func Loop(ctx context.Context, maxDelay time.Duration, next func(left time.Duration) (wait time.Duration, wake <-chan struct{}, ok bool), again func()) error {
	left, deadline := maxDelay, time.Now().Add(maxDelay)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		left, deadline = time.Until(d), d
	}
	for ; left > 0; left = time.Until(deadline) {
		wait, wake, ok := next(left)
		if !ok {
			return nil
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-wake:
			t.Stop()
		}
		again()
	}
	return nil
}
