package breakerstore

import (
	"testing"
	"time"
)

// The largest budget is that of the calls of the last 1 to 2 periods: one
// call with a long deadline excuses the misses of short budgets for a
// while, not for ever.
func TestLargestBudgetIsForgotten(t *testing.T) {
	var bs budgets
	at := func(d time.Duration) int64 { return int64(d) }
	for _, step := range []struct {
		at     time.Duration
		budget time.Duration // noted at at, unless 0
		want   time.Duration // largest at at, after the note
	}{
		{0, 50 * time.Millisecond, 50 * time.Millisecond},
		{time.Second, time.Hour, time.Hour}, // one long deadline
		{9 * time.Second, 20 * time.Millisecond, time.Hour},
		{12 * time.Second, 50 * time.Millisecond, time.Hour}, // the period before
		{19 * time.Second, 0, time.Hour},
		{21 * time.Second, 50 * time.Millisecond, 50 * time.Millisecond}, // forgotten
		{35 * time.Second, 0, 50 * time.Millisecond},
		{45 * time.Second, 0, 0}, // no call for a period
		{46 * time.Second, 30 * time.Millisecond, 30 * time.Millisecond},
	} {
		if step.budget != 0 {
			bs.note(at(step.at), step.budget)
		}
		if got := bs.largest(at(step.at)); got != step.want {
			t.Errorf("at %v: largest budget %v, want %v", step.at, got, step.want)
		}
	}
}
