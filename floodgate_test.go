package floodgate_test

import (
	"context"
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/memstore"
)

func newLimiter(t *testing.T) *floodgate.Limiter {
	t.Helper()
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustRule(t *testing.T, name string, limit int64, window time.Duration) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCheckRejectsBadHits(t *testing.T) {
	l := newLimiter(t)
	r := mustRule(t, "r", 3, time.Minute)
	for _, tc := range []struct {
		name   string
		hits   []floodgate.Hit
		want   error
		wantIn string
	}{
		{"no hits", nil, floodgate.ErrInvalidHit, "no hits"},
		{"empty key", []floodgate.Hit{{Rule: r}}, floodgate.ErrInvalidHit, "key is empty"},
		{"key over 1 MiB", []floodgate.Hit{{Rule: r, Key: strings.Repeat("k", bounds.KeyLen+1)}}, floodgate.ErrInvalidHit, "at most 1048576"},
		{"negative cost", []floodgate.Hit{{Rule: r, Key: "k", Cost: -1}}, floodgate.ErrInvalidHit, "cost -1 is below 1"},
		{"cost over capacity", []floodgate.Hit{{Rule: r, Key: "k", Cost: 4}}, floodgate.ErrInvalidHit, "could never be allowed"},
		{"sliding cost over its cap", []floodgate.Hit{{Rule: floodgate.Rule{Name: "bytes", Limit: 1 << 19, Window: time.Minute}, Key: "k", Cost: bounds.SlidingCost + 1}}, floodgate.ErrInvalidHit, "use token-bucket"},
		{"same key twice", []floodgate.Hit{{Rule: r, Key: "k"}, {Rule: r, Key: "k"}}, floodgate.ErrInvalidHit, "both name key"},
		{"invalid rule", []floodgate.Hit{{Rule: floodgate.Rule{Name: "x"}, Key: "k"}}, floodgate.ErrInvalidRule, "limit is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Check(context.Background(), tc.hits...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("Check = %v; want %v mentioning %q", err, tc.want, tc.wantIn)
			}
		})
	}
}

func TestCheckReportsTheWorst(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	ip := floodgate.Hit{Rule: mustRule(t, "ip", 5, time.Minute), Key: "192.0.2.1"}
	account := floodgate.Hit{Rule: mustRule(t, "account", 3, 10*time.Minute), Key: "acct"}
	d, err := l.Check(ctx, ip, account)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Policy != "account" || d.Remaining != 2 || len(d.Each) != 2 || d.Each[0].Remaining != 4 {
		t.Fatalf("got %+v; want allowed, reporting account (2 remaining) as the worst", d)
	}
	for range 2 {
		if _, err := l.Check(ctx, ip, account); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Check(ctx, ip); err != nil { // ip now at 4 of 5
		t.Fatal(err)
	}
	d, _ = l.Check(ctx, ip, account)
	if d.Allowed || d.Policy != "account" || d.RetryAfter <= 9*time.Minute {
		t.Fatalf("got %+v; want denied by account, whose retry-after (~10m) is the longest", d)
	}
}

// A denied check records nothing, so a hit that was within its limit
// reports the quota it still has.
func TestDeniedCheckReportsUnrecordedRemaining(t *testing.T) {
	l := newLimiter(t)
	ctx := context.Background()
	ip := floodgate.Hit{Rule: mustRule(t, "ip", 5, time.Minute), Key: "192.0.2.1"}
	account := floodgate.Hit{Rule: mustRule(t, "account", 1, time.Minute), Key: "acct"}
	l.Check(ctx, ip, account)
	d, err := l.Check(ctx, ip, account)
	if err != nil || d.Allowed || d.Each[0].Remaining != 4 {
		t.Fatalf("got %+v, %v; want denied by account with ip still at 4 remaining", d, err)
	}
}

// stallStore never answers before its context ends.
type stallStore struct{ floodgate.Store }

func (stallStore) Take(ctx context.Context, _ []floodgate.Hit) ([]floodgate.Result, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// shortStore answers with too few results.
type shortStore struct{ floodgate.Store }

func (shortStore) Take(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, nil
}

func TestStoreFailures(t *testing.T) {
	r := mustRule(t, "r", 1, time.Minute)
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		also  error
	}{
		{"store past the budget", stallStore{}, context.DeadlineExceeded},
		{"store with a short reply", shortStore{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := floodgate.New(tc.store, floodgate.Options{Timeout: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), r, "k")
			if !errors.Is(err, floodgate.ErrStoreUnavailable) || tc.also != nil && !errors.Is(err, tc.also) || d.Allowed {
				t.Fatalf("Allow = %+v, %v; want a denial-free error wrapping ErrStoreUnavailable (and %v)", d, err, tc.also)
			}
		})
	}
	if _, err := floodgate.New(nil, floodgate.Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// deadlineStore records the deadline of the context each Take gets.
type deadlineStore struct {
	floodgate.Store
	got []time.Time
}

func (s *deadlineStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	d, _ := ctx.Deadline()
	s.got = append(s.got, d)
	return make([]floodgate.Result, len(hits)), nil
}

// TestBudgetIsTheTighterDeadline: a store's call gets the Limiter's budget
// unless the caller's own deadline comes first, which it then keeps as it
// is.
func TestBudgetIsTheTighterDeadline(t *testing.T) {
	s := &deadlineStore{}
	l, err := floodgate.New(s, floodgate.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := mustRule(t, "budget", 1, time.Minute)
	soon, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	late, cancelLate := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLate()
	start := time.Now()
	for _, ctx := range []context.Context{soon, late, context.Background()} {
		if _, err := l.Allow(ctx, r, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if want, _ := soon.Deadline(); !s.got[0].Equal(want) {
		t.Errorf("caller's deadline in 100ms: the store got %v, want the caller's %v", s.got[0], want)
	}
	for i, name := range []string{"in an hour", "none"} {
		if got := s.got[i+1]; got.Before(start.Add(time.Second)) || got.After(time.Now().Add(time.Second)) {
			t.Errorf("caller's deadline %s: the store got %v, want the Limiter's budget of 1s after %v", name, got, start)
		}
	}
}

// stampStore records the take names ([floodgate.Stamp.Take]) that its
// store's Takes gave and those its Refunds received.
type stampStore struct {
	floodgate.Store
	takes, refunds [][]uint64
}

func (s *stampStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	res, err := s.Store.Take(ctx, hits)
	var names []uint64
	for _, r := range res {
		names = append(names, r.Stamp.Take)
	}
	s.takes = append(s.takes, names)
	return res, err
}

func (s *stampStore) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	var names []uint64
	for _, r := range receipts {
		names = append(names, r.Stamp.Take)
	}
	s.refunds = append(s.refunds, names)
	return s.Store.Refund(ctx, receipts)
}

// localStampStore is a stampStore whose store is a LocalStore.
type localStampStore struct{ *stampStore }

func (s localStampStore) TakeOne(ctx context.Context, h floodgate.Hit) (floodgate.Result, error) {
	return s.Store.(floodgate.LocalStore).TakeOne(ctx, h)
}

// TestRefundPassesTheStamps: the Limiter hands each Refund the stamps its
// Take gave, which alone name the take ([floodgate.Stamp.Take]), through a
// LocalStore or not; and the refunds undo each take once.
func TestRefundPassesTheStamps(t *testing.T) {
	a := mustRule(t, "ids-a", 2, time.Minute)
	b := mustRule(t, "ids-b", 2, time.Minute)
	for _, local := range []bool{false, true} {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		ss := &stampStore{Store: ms}
		var s floodgate.Store = ss
		if local {
			s = localStampStore{ss}
		}
		l, err := floodgate.New(s, floodgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var ds []floodgate.Decision
		for range 2 {
			d, err := l.Check(ctx, floodgate.Hit{Rule: a, Key: "k"}, floodgate.Hit{Rule: b, Key: "k"})
			if err != nil || !d.Allowed {
				t.Fatalf("local %v: check: %+v, %v", local, d, err)
			}
			ds = append(ds, d)
		}
		for _, d := range ds {
			if err := l.Refund(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		if len(ss.takes) != 2 || len(ss.takes[0]) != 2 || ss.takes[0][0] == 0 || ss.takes[0][1] == 0 ||
			ss.takes[0][0] == ss.takes[1][0] || ss.takes[0][1] == ss.takes[1][1] {
			t.Fatalf("local %v: takes named %v; want two takes of two hits, each named, the two takes apart", local, ss.takes)
		}
		if !reflect.DeepEqual(ss.refunds, ss.takes) {
			t.Errorf("local %v: refunds got take names %v; want the takes' own %v", local, ss.refunds, ss.takes)
		}
		if d, _ := l.Peek(ctx, floodgate.Hit{Rule: a, Key: "k"}); d.Remaining != 1 {
			t.Errorf("local %v: after both refunds, %d remaining; want 1 (2, less the peeked hit)", local, d.Remaining)
		}
	}
}

func TestRefundOfDenialIsNoop(t *testing.T) {
	l := newLimiter(t)
	r := mustRule(t, "r", 1, time.Minute)
	ctx := context.Background()
	l.Allow(ctx, r, "k")
	denied, _ := l.Allow(ctx, r, "k")
	if err := l.Refund(ctx, denied); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, floodgate.Decision{Allowed: true}); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, floodgate.Hit{Rule: r, Key: "k"}); d.Allowed {
		t.Fatalf("refunding a denial freed quota: %+v", d)
	}
}

func TestWait(t *testing.T) {
	l := newLimiter(t)
	r := mustRule(t, "wait", 1, 50*time.Millisecond)
	hit := floodgate.Hit{Rule: r, Key: "k"}
	ctx := context.Background()
	if d, err := l.Wait(ctx, time.Second, hit); err != nil || !d.Allowed {
		t.Fatalf("first Wait = %+v, %v; want allowed at once", d, err)
	}
	if d, err := l.Wait(ctx, time.Millisecond, hit); err != nil || d.Allowed || d.RetryAfter <= time.Millisecond {
		t.Fatalf("Wait with a 1ms budget = %+v, %v; want an immediate denial", d, err)
	}
	if d, err := l.Wait(ctx, time.Second, hit); err != nil || !d.Allowed {
		t.Fatalf("Wait with a 1s budget = %+v, %v; want allowed after the window slides", d, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancelShort()
	if d, err := l.Wait(short, time.Second, hit); err != nil || d.Allowed {
		t.Fatalf("Wait with a deadline before the retry = %+v, %v; want an immediate denial", d, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Wait(cctx, time.Second, hit); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v; want context.Canceled", err)
	}
}

// The core must not depend on any store, HTTP or metrics package: only
// the standard library, and the module's own key encoding, bounds and
// wait loop (which depend on nothing else either, as this list of every dependency
// shows).
func TestCoreDependsOnStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/floodgate-rl/floodgate", "github.com/floodgate-rl/floodgate/internal/keyenc", "github.com/floodgate-rl/floodgate/internal/bounds", "github.com/floodgate-rl/floodgate/internal/pace":
		default:
			t.Errorf("core package imports %s; it must import only the standard library, internal/keyenc, internal/bounds and internal/pace", dep)
		}
	}
}
