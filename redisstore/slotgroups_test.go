package redisstore

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestSlotGroups: on a Cluster, hits are grouped by slot, each group
// holding every hit of its slot in the check's order, the groups in
// ascending slot order; hits of one slot, or a single hit, are not split.
func TestSlotGroups(t *testing.T) {
	s, _, _ := faultStore(t)
	r := mustRule(t, "g", 5, time.Minute, floodgate.FixedWindow)
	a, b := twoSlots(t, s, r, r)
	a2 := floodgate.Hit{Rule: mustRule(t, "g", 5, time.Hour, floodgate.FixedWindow), Key: a.Key, Cost: 1} // a's tag, another window
	groups := s.slotGroups([]floodgate.Hit{b, a, b2(b), a2})
	if len(groups) != 2 {
		t.Fatalf("%d groups for two slots: %+v", len(groups), groups)
	}
	if groups[0].slot >= groups[1].slot || groups[0].slot != keySlot(s.tag(r.Name, a.Key)) {
		t.Fatalf("groups in slots %d, %d; want a's slot first, ascending", groups[0].slot, groups[1].slot)
	}
	if !slices.Equal(groups[0].idx, []int{1, 3}) || !slices.Equal(groups[1].idx, []int{0, 2}) {
		t.Fatalf("positions %v and %v; want [1 3] (a) and [0 2] (b)", groups[0].idx, groups[1].idx)
	}
	if groups[0].hits[1] != a2 || groups[1].hits[0] != b {
		t.Fatalf("the groups' hits are not the check's: %+v", groups)
	}
	for _, hits := range [][]floodgate.Hit{{a}, {a, a2}} {
		if g := s.slotGroups(hits); g != nil {
			t.Errorf("hits of one slot split into %+v", g)
		}
	}
}

// b2 is b under another window: the same hash tag, so the same slot.
func b2(b floodgate.Hit) floodgate.Hit {
	b.Rule.Window = 2 * b.Rule.Window
	return b
}

// TestCrossSlotInvalidHitRollsBack: a hit refused before its slot's
// script ran (here a cost above its limit) fails the check with
// ErrInvalidHit, and the slots before it are rolled back.
func TestCrossSlotInvalidHitRollsBack(t *testing.T) {
	s, _, _ := faultStore(t)
	ra := mustRule(t, "ip", 5, time.Hour, floodgate.FixedWindow)
	a, b := twoSlots(t, s, ra, mustRule(t, "account", 1, time.Hour, floodgate.FixedWindow))
	b.Cost = 2
	_, err := s.Take(ctx(t), []floodgate.Hit{a, b})
	if !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Fatalf("take with an invalid hit in the second slot: %v; want ErrInvalidHit", err)
	}
	if res, err := s.Peek(ctx(t), []floodgate.Hit{a}); err != nil || res[0].Remaining != 4 {
		t.Fatalf("a after the check failed: %+v, %v; want Remaining 4 (after the peeked hit): the first slot must be rolled back", res, err)
	}
}

// TestCrossSlotDenialReportsLaterSlots: when a slot denies, the slots
// after it are peeked, and their hits report what a peek answers.
func TestCrossSlotDenialReportsLaterSlots(t *testing.T) {
	s, _, _ := faultStore(t)
	a, b := twoSlots(t, s, mustRule(t, "first", 1, time.Hour, floodgate.FixedWindow), mustRule(t, "second", 5, time.Hour, floodgate.FixedWindow))
	if _, err := s.Take(ctx(t), []floodgate.Hit{a}); err != nil {
		t.Fatal(err)
	}
	b.Cost = 2
	res, err := s.Take(ctx(t), []floodgate.Hit{a, b})
	if err != nil || res[0].Allowed {
		t.Fatalf("take: %+v, %v; want a denied", res, err)
	}
	if !res[1].Allowed || res[1].Remaining != 3 || res[1].ResetAfter <= 0 || res[1].Stamp != (floodgate.Stamp{}) {
		t.Fatalf("b after a's denial: %+v; want the peek's answer (allowed, Remaining 3, no stamp)", res[1])
	}
}

// TestBackgroundRollbacksAreBounded: a roll-back that fails is retried in
// the background, up to maxBackgroundRollbacks at once; past the bound,
// or once the store is shutting down, it is dropped, and the count of
// those running stays right.
func TestBackgroundRollbacksAreBounded(t *testing.T) {
	s, f, _ := faultStore(t)
	f.set(func(script Script, _ []string) error {
		if isRefund(script) {
			return errInjected
		}
		return nil
	}, nil)
	r := mustRule(t, "bound", 5, time.Hour, floodgate.FixedWindow)
	taken := []floodgate.Receipt{{Hit: floodgate.Hit{Rule: r, Key: "k", Cost: 1}, Stamp: floodgate.Stamp{At: time.Now(), Epoch: 1}}}
	s.roll.queued.Store(maxBackgroundRollbacks - 1)
	s.rollback(ctx(t), taken)
	if n := s.roll.queued.Load(); n != maxBackgroundRollbacks {
		t.Fatalf("%d roll-backs counted after the last one the bound allows; want %d", n, maxBackgroundRollbacks)
	}
	s.rollback(ctx(t), taken)
	if n := s.roll.queued.Load(); n != maxBackgroundRollbacks {
		t.Fatalf("%d roll-backs counted after one past the bound; want it dropped, %d", n, maxBackgroundRollbacks)
	}
	s.roll.shutdown() // the background one stops
	if n := s.roll.queued.Load(); n != maxBackgroundRollbacks-1 {
		t.Fatalf("%d roll-backs counted once the background one stopped; want %d", n, maxBackgroundRollbacks-1)
	}
	s.rollback(ctx(t), taken) // shutting down: dropped
	if n := s.roll.queued.Load(); n != maxBackgroundRollbacks-1 {
		t.Fatalf("%d roll-backs counted after one during shutdown; want %d", n, maxBackgroundRollbacks-1)
	}
}

// TestFailedRollbackRetriesArePaced: a roll-back that keeps failing is
// retried after a pause that starts at 50ms and doubles, not in a loop.
func TestFailedRollbackRetriesArePaced(t *testing.T) {
	s, f, _ := faultStore(t)
	var refunds atomic.Int64
	f.set(func(script Script, _ []string) error {
		if isRefund(script) {
			refunds.Add(1)
			return errInjected
		}
		return nil
	}, nil)
	r := mustRule(t, "paced", 5, time.Hour, floodgate.FixedWindow)
	taken := []floodgate.Receipt{{Hit: floodgate.Hit{Rule: r, Key: "k", Cost: 1}, Stamp: floodgate.Stamp{At: time.Now(), Epoch: 1}}}
	start := time.Now()
	s.rollback(ctx(t), taken)
	time.Sleep(400 * time.Millisecond)
	s.Close()
	// The first attempt, then retries at 50, 150 and 350ms at the soonest.
	if n, d := refunds.Load(), time.Since(start); n > 4+int64(d/(400*time.Millisecond)) {
		t.Fatalf("%d refund calls in %v; want at most 4 with pauses of 50, 100 and 200ms", n, d)
	}
}

// TestCrossSlotPeek: a Peek whose hits live in several slots peeks at
// each slot and answers in the check's order; a slot that fails fails the
// Peek, and the error keeps its cause.
func TestCrossSlotPeek(t *testing.T) {
	s, f, _ := faultStore(t)
	a, b := twoSlots(t, s, mustRule(t, "first", 3, time.Hour, floodgate.FixedWindow), mustRule(t, "second", 5, time.Hour, floodgate.FixedWindow))
	if _, err := s.Take(ctx(t), []floodgate.Hit{a}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Peek(ctx(t), []floodgate.Hit{b, a})
	if err != nil || len(res) != 2 || res[0].Remaining != 4 || res[1].Remaining != 1 {
		t.Fatalf("peek of b and a: %+v, %v; want Remaining 4 and 1, in the check's order", res, err)
	}
	f.set(func(script Script, keys []string) error {
		if keySlot(keys[0]) == keySlot(s.tag(b.Rule.Name, b.Key)) {
			return errInjected
		}
		return nil
	}, nil)
	if res, err := s.Peek(ctx(t), []floodgate.Hit{a, b}); !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, errInjected) {
		t.Fatalf("peek with b's slot failing: %+v, %v; want ErrStoreUnavailable, with the cause", res, err)
	}
}
