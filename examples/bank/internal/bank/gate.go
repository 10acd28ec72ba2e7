package bank

import (
	"context"
	"errors"
	"sync/atomic"
)

// errBusy reports that a gate's slots and queue are all taken.
var errBusy = errors.New("bank: too many password checks in progress")

// gate bounds the password checks that run at once. bcrypt is pure CPU: a
// burst of logins that checked every password at once would starve the
// rest of the process (the rate limiter's store calls among them, which
// would then miss their budget). A check waits for one of the slots in a
// short queue; a check that finds the queue full is refused at once, and
// the caller answers 503 with Retry-After. It is safe for concurrent use.
type gate struct {
	slots    chan struct{}
	queued   atomic.Int64
	maxQueue int64
}

// newGate returns a gate of n slots (at least 1) and a queue of queue
// waiters.
func newGate(n, queue int) *gate {
	return &gate{slots: make(chan struct{}, max(n, 1)), maxQueue: int64(max(queue, 0))}
}

// enter takes a slot, waiting in the queue if there is room, and returns
// the function that gives the slot back. It fails with errBusy when the
// queue is full, or with ctx's error when ctx ends first.
func (g *gate) enter(ctx context.Context) (release func(), err error) {
	release = func() { <-g.slots }
	select {
	case g.slots <- struct{}{}:
		return release, nil
	default:
	}
	if g.queued.Add(1) > g.maxQueue {
		g.queued.Add(-1)
		return nil, errBusy
	}
	defer g.queued.Add(-1)
	select {
	case g.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
