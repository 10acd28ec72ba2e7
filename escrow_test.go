package floodgate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// takeCounter counts the Takes of the store it wraps (and hides its
// LocalStore, as a remote store has none).
type takeCounter struct {
	floodgate.Store
	takes atomic.Int64
}

func (c *takeCounter) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, hits)
}

func TestEscrowOptionsAreValidated(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	for _, o := range []floodgate.Escrow{{Period: 10 * time.Millisecond}, {Period: 2 * time.Second}, {Period: 100*time.Millisecond + 1}, {Period: 100 * time.Millisecond, Keys: -1}} {
		if _, err := floodgate.New(store, floodgate.Options{Escrow: o}); err == nil {
			t.Errorf("New with %+v: no error; want the period within 50ms to 1s (whole µs), keys not negative", o)
		}
	}
	l, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := floodgate.Rule{Name: "r", Limit: 10, Window: time.Minute}
	if _, err := l.Check(context.Background(), floodgate.Hit{Rule: r, Key: "k", Lease: time.Second}); !errors.Is(err, floodgate.ErrInvalidHit) {
		t.Fatalf("Check of a hit with Lease set: %v; want ErrInvalidHit (leases are the Limiter's own)", err)
	}
}

// TestEscrowSizesLeases: a cold key is a plain take; the second hit
// within a period takes a lease of a quarter of the capacity at most;
// near the limit, plain takes again; and every figure is a plain take's.
func TestEscrowSizesLeases(t *testing.T) {
	l, direct, counted := escrowAndDirect(t, time.Second)
	ctx := context.Background()
	r := floodgate.Rule{Name: "sizes", Limit: 100, Window: time.Hour}
	free := func() int64 {
		p, err := direct.Peek(ctx, floodgate.Hit{Rule: r, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Allowed {
			return p.Remaining
		}
		return p.Remaining + 1
	}
	allow := func(i int) {
		t.Helper()
		d, err := l.Allow(ctx, r, "k")
		if err != nil {
			t.Fatal(err)
		}
		if want := r.Limit - int64(i); !d.Allowed || d.Remaining != want || d.Policy != "sizes" || d.Limit != 100 || d.Window != time.Hour || d.RetryAfter != 0 {
			t.Fatalf("hit %d: %+v; want allowed, Remaining %d, the rule's figures", i, d, want)
		}
	}
	allow(1)
	if n, f := counted.takes.Load(), free(); n != 1 || f != 99 {
		t.Fatalf("after a cold key's first hit: %d takes, %d free; want 1 plain take, 99 free", n, f)
	}
	allow(2)
	// A lease of a quarter of the capacity: 25 units held, 1 of them used.
	if n, f := counted.takes.Load(), free(); n != 2 || f != 99-25 {
		t.Fatalf("after the second hit: %d takes, %d free; want a lease of 25 (a quarter of the capacity), %d free", n, f, 99-25)
	}
	for i := 3; i <= 26; i++ {
		allow(i)
	}
	if n := counted.takes.Load(); n != 2 {
		t.Fatalf("after 26 hits: %d takes; want 2, the lease deciding hits 2 to 26", n)
	}
	// The next lease is a quarter of the 74 left: 18.
	allow(27)
	if n, f := counted.takes.Load(), free(); n != 3 || f != 74-18 {
		t.Fatalf("after hit 27: %d takes, %d free; want a third take, a lease of 18, %d free", n, f, 74-18)
	}
	for i := 28; i <= 90; i++ {
		allow(i)
	}
	// Near the limit, leases of a quarter of what is left: with 10 left,
	// 2 units (hits 91 and 92), then 2 (93, 94), then 1 a take: 8 takes.
	before := counted.takes.Load()
	for i := 91; i <= 100; i++ {
		allow(i)
	}
	if n := counted.takes.Load() - before; n != 8 {
		t.Fatalf("hits 91 to 100: %d takes; want 8, leases of a quarter of what is left, then plain takes", n)
	}
	d, err := l.Allow(ctx, r, "k")
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Fatalf("hit 101: %+v, %v; want denied, Remaining 0, a RetryAfter", d, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if f := free(); f != 0 {
		t.Fatalf("after Close: %d free; want 0, the store holding the 100 hits admitted", f)
	}
}

// TestEscrowRefundAfterTheLeaseEnded: a hit decided from a lease that
// ended with every unit used refunds at the store, once; one whose
// lease gave back its unused units credits nothing more (a take is
// refunded once), never more than it took.
func TestEscrowRefundAfterTheLeaseEnded(t *testing.T) {
	const period = 50 * time.Millisecond
	l, direct, _ := escrowAndDirect(t, period)
	ctx := context.Background()
	r := floodgate.Rule{Name: "late", Limit: 100, Window: time.Hour}
	free := func() int64 {
		p, err := direct.Peek(ctx, floodgate.Hit{Rule: r, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		return p.Remaining + 1
	}
	var ds []floodgate.Decision
	for range 26 { // a plain take, then a lease of 25, all used
		d, err := l.Allow(ctx, r, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		ds = append(ds, d)
	}
	// The lease ended, and what it left unused went back (none when the
	// hits came as planned; a lease cut short by a slow scheduler leaves
	// some, which the sweeper returns within a period or two).
	freeAfter := func(want int64, what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		f := free()
		for ; f != want && time.Now().Before(deadline); f = free() {
			time.Sleep(period)
		}
		if f != want {
			t.Fatalf("%s: %d free, want %d", what, f, want)
		}
	}
	time.Sleep(2 * period)
	freeAfter(74, "after 26 hits and their lease's end")
	for range 2 {
		if err := l.Refund(ctx, ds[10]); err != nil {
			t.Fatal(err)
		}
	}
	if f := free(); f != 75 {
		t.Fatalf("after refunding (twice) a hit of a spent lease that ended: %d free, want 75: the store credits it, once", f)
	}
	// A lease with unused units: they go back when it ends, and a later
	// refund of one of its hits credits nothing more.
	var more []floodgate.Decision
	for range 3 {
		d, err := l.Allow(ctx, r, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		more = append(more, d)
	}
	time.Sleep(2 * period)
	freeAfter(72, "a period after 3 more hits (the unused units of their lease went back)")
	if err := l.Refund(ctx, more[2]); err != nil {
		t.Fatal(err)
	}
	// (Hit 1 of the 3 was a plain take, after a quiet period; hits 2 and
	// 3 came from a lease of 18, whose 16 unused units went back.)
	if f := free(); f != 72 {
		t.Fatalf("after refunding a hit of a lease whose unused units went back: %d free, want 72: a take is refunded once, never more", f)
	}
}

// TestEscrowSkipsOnlyRefundsThatCreditNothing grants leases on a
// memstore whose clock the test sets, refunds their unused units at a
// later time, and checks the Limiter's test of a refund that would credit
// nothing against what the store credits: a refund it skips must credit
// nothing, and a refund that credits must not be skipped.
func TestEscrowSkipsOnlyRefundsThatCreditNothing(t *testing.T) {
	const lease = 100 * time.Millisecond
	// A window's end, for windows of a minute.
	minute := time.Date(2026, 12, 3, 12, 1, 0, 0, time.UTC)
	// Token buckets of T = 1µs (a small burst) and of T = 36s.
	fast := floodgate.Rule{Name: "fast", Limit: 3_600_000_000, Window: time.Hour, Algorithm: floodgate.TokenBucket, Burst: 40}
	slow := floodgate.Rule{Name: "slow", Limit: 100, Window: time.Hour, Algorithm: floodgate.TokenBucket}
	fixed := floodgate.Rule{Name: "fixed", Limit: 100, Window: time.Minute, Algorithm: floodgate.FixedWindow}
	counter := floodgate.Rule{Name: "counter", Limit: 100, Window: time.Minute, Algorithm: floodgate.SlidingWindowCounter}
	log := floodgate.Rule{Name: "log", Limit: 100, Window: time.Minute}
	for _, tc := range []struct {
		name    string
		rule    floodgate.Rule
		grant   time.Time     // the store's time of the grant, and of its answer
		after   time.Duration // from the answer to the refund
		nothing bool          // the refund credits nothing, and is skipped
	}{
		{"bucket whose unused units refilled", fast, minute, lease + 8*time.Microsecond, true},
		{"bucket just before they refilled", fast, minute, lease + 7*time.Microsecond, false},
		{"bucket whose units still weigh", slow, minute, lease + time.Second, false},
		{"window whose lease was cut, after its end", fixed, minute.Add(-30 * time.Millisecond), 30 * time.Millisecond, true},
		{"window whose lease was cut, before its end", fixed, minute.Add(-30 * time.Millisecond), 29 * time.Millisecond, false},
		{"window whose lease was not cut", fixed, minute.Add(-time.Second), lease, false},
		{"counter whose lease was cut, after its end", counter, minute.Add(-30 * time.Millisecond), 30 * time.Millisecond, true},
		{"counter whose lease was not cut", counter, minute.Add(-time.Second), lease, false},
		{"log", log, minute, 10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(tc.grant.UnixNano())
			store := memstore.New(memstore.Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
			defer store.Close()
			ctx := context.Background()
			h := floodgate.Hit{Rule: tc.rule, Key: "k", Cost: 10, Lease: lease}
			rs, err := store.Take(ctx, []floodgate.Hit{h})
			if err != nil || !rs[0].Allowed {
				t.Fatalf("lease of 10: %+v, %v", rs, err)
			}
			const unused = 8 // 2 of the 10 used
			now.Add(int64(tc.after))
			if got := floodgate.CreditsNothing(h, rs[0], 0, int64(tc.after), unused); got != tc.nothing {
				t.Fatalf("credits nothing %v %v after the answer: %v; want %v", unused, tc.after, got, tc.nothing)
			}
			free := func() int64 {
				p, err := store.Peek(ctx, []floodgate.Hit{{Rule: tc.rule, Key: "k", Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				return p[0].Remaining
			}
			before := free()
			back := h
			back.Cost = unused
			if err := store.Refund(ctx, []floodgate.Receipt{{Hit: back, Stamp: rs[0].Stamp}}); err != nil {
				t.Fatal(err)
			}
			if credited := free() - before; (credited == 0) != tc.nothing {
				t.Fatalf("the store credited %d of the %d unused units; the Limiter skips the refund: %v", credited, unused, tc.nothing)
			}
		})
	}
}

// escrowAndDirect returns, on one memstore closed when t ends, a Limiter
// with escrow of period (its store calls counted) and one without, to
// peek what the store holds.
func escrowAndDirect(t *testing.T, period time.Duration) (escrow, direct *floodgate.Limiter, counted *takeCounter) {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	counted = &takeCounter{Store: store}
	escrow, err := floodgate.New(counted, floodgate.Options{Escrow: floodgate.Escrow{Period: period}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { escrow.Close() })
	if direct, err = floodgate.New(store, floodgate.Options{}); err != nil {
		t.Fatal(err)
	}
	return escrow, direct, counted
}
