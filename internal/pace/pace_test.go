package pace

import (
	"context"
	"errors"
	"testing"
	"time"
)

// step is one answer of next: wait that long (waking on wake), or stop.
type step struct {
	wait time.Duration
	wake bool // a channel that is ready at once
	stop bool
}

func TestLoop(t *testing.T) {
	const maxDelay = time.Hour
	closed := make(chan struct{})
	close(closed)
	tests := []struct {
		name   string
		steps  []step
		cancel bool // ctx is done before the loop
		again  int  // calls of again
		err    error
	}{
		{name: "stops at once", steps: []step{{stop: true}}},
		{name: "a wait that a ready channel ends", steps: []step{{wait: maxDelay, wake: true}, {wait: maxDelay, wake: true}, {stop: true}}, again: 2},
		{name: "short waits", steps: []step{{wait: time.Microsecond}, {wait: 0}, {stop: true}}, again: 2},
		{name: "a done ctx ends the wait", steps: []step{{wait: maxDelay}}, cancel: true, err: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				cancel()
			}
			calls, again := 0, 0
			var lefts []time.Duration
			err := Loop(ctx, maxDelay, func(left time.Duration) (time.Duration, <-chan struct{}, bool) {
				lefts = append(lefts, left)
				s := tt.steps[calls]
				calls++
				var wake <-chan struct{}
				if s.wake {
					wake = closed
				}
				return s.wait, wake, !s.stop
			}, func() { again++ })
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("Loop = %v; want %v", err, tt.err)
			}
			if again != tt.again || calls != len(tt.steps) {
				t.Fatalf("again called %d times, next %d; want %d and %d", again, calls, tt.again, len(tt.steps))
			}
			if lefts[0] != maxDelay {
				t.Fatalf("first wait may take %v; want all of maxDelay, %v", lefts[0], maxDelay)
			}
			for k := 1; k < len(lefts); k++ {
				if lefts[k] >= lefts[k-1] {
					t.Fatalf("what is left grew from %v to %v", lefts[k-1], lefts[k])
				}
			}
		})
	}
}

// TestLoopWaitsAtLeastAMillisecond: a wait of zero still sleeps, so that a
// denial without a RetryAfter cannot spin (timers never fire early: this
// bound is safe on a loaded machine).
func TestLoopWaitsAtLeastAMillisecond(t *testing.T) {
	calls := 0
	start := time.Now()
	Loop(context.Background(), time.Hour, func(time.Duration) (time.Duration, <-chan struct{}, bool) {
		calls++
		return 0, nil, calls == 1
	}, func() {})
	if waited := time.Since(start); waited < time.Millisecond {
		t.Fatalf("a wait of 0 took %v; want at least 1ms", waited)
	}
}

// TestLoopBudgetIsTotal: the waits share one budget. After a first wait of
// 15ms, at most maxDelay - 15ms is left, where a budget per wait would
// offer all of maxDelay again.
func TestLoopBudgetIsTotal(t *testing.T) {
	const maxDelay, first = time.Hour, 15 * time.Millisecond
	var lefts []time.Duration
	Loop(context.Background(), maxDelay, func(left time.Duration) (time.Duration, <-chan struct{}, bool) {
		lefts = append(lefts, left)
		return first, nil, len(lefts) == 1
	}, func() {})
	if len(lefts) != 2 || lefts[0] != maxDelay || lefts[1] > maxDelay-first {
		t.Fatalf("left before each wait: %v; want %v, then at most %v", lefts, maxDelay, maxDelay-first)
	}
}

// TestLoopEndsByTheDeadline: a ctx deadline sooner than maxDelay bounds
// the first wait, and once it passes nothing more is waited for.
func TestLoopEndsByTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var lefts []time.Duration
	err := Loop(ctx, time.Hour, func(left time.Duration) (time.Duration, <-chan struct{}, bool) {
		lefts = append(lefts, left)
		return time.Millisecond, nil, true
	}, func() {})
	if len(lefts) == 0 || lefts[0] > 20*time.Millisecond {
		t.Fatalf("left before each wait: %v; want at most the deadline's 20ms", lefts)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Loop = %v; want nil or the deadline", err)
	}
	if d, _ := ctx.Deadline(); time.Now().Before(d) {
		t.Fatal("Loop ended before the deadline, with next still asking to wait")
	}
}
