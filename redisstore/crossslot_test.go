package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-rl/floodgate"
	"github.com/redis/rueidis"
)

// These tests drive the cross-slot path through a Conn that claims to be
// a Cluster and injects faults, in front of miniredis (which has no slots,
// so every script would run anyway): deterministic cases that a real
// Cluster cannot produce on demand. The real-Cluster tests are in
// cluster_test.go.

// faultConn is a Conn on miniredis that reports a Cluster and lets a test
// fail calls: before (the script did not run) or after (it ran, the reply
// was lost).
type faultConn struct {
	c rueidis.Client

	mu     sync.Mutex
	before func(script Script, keys []string) error // guarded by mu
	after  func(script Script, keys []string) error // guarded by mu
	evals  atomic.Int64
}

func newFaultConn(t *testing.T) (*faultConn, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &faultConn{c: c}, m
}

func (f *faultConn) set(before, after func(Script, []string) error) {
	f.mu.Lock()
	f.before, f.after = before, after
	f.mu.Unlock()
}

func (f *faultConn) Cluster() bool { return true }

func (f *faultConn) Ping(ctx context.Context) error {
	return f.c.Do(ctx, f.c.B().Ping().Build()).Error()
}

func (f *faultConn) Del(ctx context.Context, key string) error {
	return f.c.Do(ctx, f.c.B().Del().Key(key).Build()).Error()
}

func (f *faultConn) Eval(ctx context.Context, script Script, keys, args []string) ([]int64, error) {
	f.evals.Add(1)
	f.mu.Lock()
	before, after := f.before, f.after
	f.mu.Unlock()
	if before != nil {
		if err := before(script, keys); err != nil {
			return nil, err
		}
	}
	res := f.c.Do(ctx, f.c.B().Eval().Script(script.Source).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if after != nil {
		if err := after(script, keys); err != nil {
			return nil, err
		}
	}
	if n, err := res.AsInt64(); err == nil {
		return []int64{n}, nil
	}
	msgs, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		if out[i], err = m.AsInt64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var errInjected = errors.New("injected fault")

// faultStore returns a store on a faultConn.
func faultStore(t *testing.T) (*Store, *faultConn, rueidis.Client) {
	t.Helper()
	f, _ := newFaultConn(t)
	s, err := New(ctx(t), Options{Conn: f, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f, f.c
}

// twoSlots returns hits a and b under rules ra and rb with a's slot below
// b's.
func twoSlots(t *testing.T, s *Store, ra, rb floodgate.Rule) (a, b floodgate.Hit) {
	t.Helper()
	for i := 0; ; i++ {
		a = floodgate.Hit{Rule: ra, Key: "a-" + strconv.Itoa(i), Cost: 1}
		b = floodgate.Hit{Rule: rb, Key: "b-" + strconv.Itoa(i), Cost: 1}
		if keySlot(s.tag(ra.Name, a.Key)) < keySlot(s.tag(rb.Name, b.Key)) {
			return a, b
		}
	}
}

// isRefund matches calls of the refund script.
func isRefund(script Script) bool { return script.SHA1 == refundScript.SHA1 }

func TestCrossSlotFailedRollbackIsRetried(t *testing.T) {
	s, f, raw := faultStore(t)
	a, b := twoSlots(t, s, mustRule(t, "ip", 5, time.Hour, floodgate.SlidingWindow), mustRule(t, "account", 1, time.Hour, floodgate.SlidingWindow))
	if _, err := s.Take(ctx(t), []floodgate.Hit{b}); err != nil {
		t.Fatal(err)
	}
	var refunds, failed atomic.Int64
	var hold atomic.Bool
	hold.Store(true)
	f.set(func(script Script, _ []string) error {
		if !isRefund(script) {
			return nil
		}
		refunds.Add(1)
		if hold.Load() {
			failed.Add(1)
			return errInjected // the roll-back, and its retries until released, fail
		}
		return nil
	}, nil)
	res, err := s.Take(ctx(t), []floodgate.Hit{a, b})
	if err != nil || res[1].Allowed || !res[0].Allowed {
		t.Fatalf("take: %+v, %v; want a within its limit, b denied", res, err)
	}
	if got := slotState(t, raw, s, a.Rule, a.Key); got != "1" {
		t.Fatalf("a holds %q after the failed roll-back, want the reservation (1)", got)
	}
	eventually(t, 5*time.Second, func() error {
		if failed.Load() < 2 {
			return errors.New("no retry yet")
		}
		return nil
	})
	hold.Store(false)
	eventually(t, 10*time.Second, func() error {
		if got := slotState(t, raw, s, a.Rule, a.Key); got != "" {
			return fmt.Errorf("a holds %q; a failed roll-back must be retried until it succeeds", got)
		}
		return nil
	})
	if n, f := refunds.Load(), failed.Load(); n != f+1 {
		t.Fatalf("%d refund calls, %d failed; want retries to stop after the first success", n, f)
	}
}

func TestCrossSlotUnsureSlotIsLeftToExpire(t *testing.T) {
	s, f, raw := faultStore(t)
	first := mustRule(t, "ip", 5, time.Hour, floodgate.TokenBucket)
	a, b := twoSlots(t, s, first, mustRule(t, "acct-s", 5, time.Hour, floodgate.SlidingWindow))
	// and a token bucket in b's slot too (the rule's name is part of the
	// hash tag: search for a key that lands there).
	bSlot := keySlot(s.tag(b.Rule.Name, b.Key))
	bt := floodgate.Hit{Rule: mustRule(t, "acct-t", 5, time.Hour, floodgate.TokenBucket), Cost: 1}
	for i := 0; keySlot(s.tag(bt.Rule.Name, bt.Key)) != bSlot; i++ {
		bt.Key = "t-" + strconv.Itoa(i)
	}
	f.set(nil, func(script Script, keys []string) error {
		if !isRefund(script) && !script.ReadOnly && keySlot(keys[0]) == bSlot {
			return errInjected // b's slot ran the take, the reply is lost
		}
		return nil
	})
	_, err := s.Take(ctx(t), []floodgate.Hit{a, b, bt})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("take: %v; want ErrStoreUnavailable", err)
	}
	f.set(nil, nil)
	// A refund credits cost*T less the take's age, so a fresh bucket may
	// keep a TAT a hair after now (miniredis never expires it): anything
	// but the reservation's TAT, 12 minutes ahead.
	if got := slotState(t, raw, s, a.Rule, a.Key); got != "" {
		tat, _, _ := strings.Cut(got, ":") // "<TAT>:<epoch>"
		if tat, err := strconv.ParseInt(tat, 10, 64); err != nil || tat > time.Now().Add(time.Second).UnixMicro() {
			t.Fatalf("a (token bucket, surely taken) holds %q; it must be rolled back", got)
		}
	}
	if got := slotState(t, raw, s, b.Rule, b.Key); got != "1" {
		t.Fatalf("b (sliding window, maybe taken) holds %q; with no stamp to refund it by, its reservation must be left to expire", got)
	}
	if got := slotState(t, raw, s, bt.Rule, bt.Key); got == "" {
		t.Fatal("bt (token bucket, maybe taken) was credited; an unsure token bucket must be left to refill, not credited for a take that may not have run")
	}
}

func TestCrossSlotPeekFailureKeepsTheDenial(t *testing.T) {
	s, f, _ := faultStore(t)
	a, b := twoSlots(t, s, mustRule(t, "first", 1, time.Hour, floodgate.SlidingWindow), mustRule(t, "second", 5, time.Hour, floodgate.SlidingWindow))
	if _, err := s.Take(ctx(t), []floodgate.Hit{a}); err != nil {
		t.Fatal(err)
	}
	f.set(func(script Script, _ []string) error {
		if script.ReadOnly {
			return errInjected
		}
		return nil
	}, nil)
	res, err := s.Take(ctx(t), []floodgate.Hit{a, b})
	if err != nil || res[0].Allowed || res[0].RetryAfter <= 0 || !res[1].Allowed {
		t.Fatalf("take: %+v, %v; a denial must stay a denial when a later slot cannot be read", res, err)
	}
}

func TestCloseStopsBackgroundRollbacks(t *testing.T) {
	f, _ := newFaultConn(t)
	s, err := New(ctx(t), Options{Conn: f, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := twoSlots(t, s, mustRule(t, "ip", 5, time.Hour, floodgate.SlidingWindow), mustRule(t, "account", 1, time.Hour, floodgate.SlidingWindow))
	if _, err := s.Take(ctx(t), []floodgate.Hit{b}); err != nil {
		t.Fatal(err)
	}
	f.set(func(script Script, _ []string) error {
		if isRefund(script) {
			return errInjected // every roll-back fails
		}
		return nil
	}, nil)
	for range 5 {
		if _, err := s.Take(ctx(t), []floodgate.Hit{a, b}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.roll.queued.Load(); n != 5 {
		t.Fatalf("%d roll-backs in the background, want 5", n)
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with roll-backs pending; it must stop them", d)
	}
	if n := s.roll.queued.Load(); n != 0 {
		t.Fatalf("%d roll-backs still running after Close", n)
	}
}

func TestReservationLife(t *testing.T) {
	for _, tc := range []struct {
		hits []floodgate.Hit
		want time.Duration
	}{
		{[]floodgate.Hit{{Rule: mustRule(t, "s", 10, time.Minute, floodgate.SlidingWindow), Cost: 1}}, time.Minute},
		{[]floodgate.Hit{{Rule: mustRule(t, "f", 10, time.Hour, floodgate.FixedWindow), Cost: 1}}, time.Hour},
		{[]floodgate.Hit{{Rule: mustRule(t, "t", 10, time.Minute, floodgate.TokenBucket), Cost: 3}}, 18 * time.Second},
		{[]floodgate.Hit{
			{Rule: mustRule(t, "t", 60, time.Minute, floodgate.TokenBucket), Cost: 1},
			{Rule: mustRule(t, "s", 10, 2*time.Second, floodgate.SlidingWindow), Cost: 1},
		}, 2 * time.Second},
	} {
		if got := reservationLife(receipts(tc.hits, nil)); got != tc.want {
			t.Errorf("reservationLife(%v) = %v, want %v", tc.hits, got, tc.want)
		}
	}
}
