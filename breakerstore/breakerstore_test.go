package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The breaker forwards everything faithfully while closed.
func TestConformance(t *testing.T) {
	storetest.RunFakeClock(t, func(t *testing.T, clock *storetest.FakeClock) floodgate.Store {
		ms := memstore.New(memstore.Options{Now: clock.Now})
		t.Cleanup(func() { ms.Close() })
		bs, err := breakerstore.New(ms, breakerstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return bs
	})
}

type fixture struct {
	fault   *faultstore.Store
	breaker *breakerstore.Store
	limiter *floodgate.Limiter
	rule    floodgate.Rule

	mu          sync.Mutex
	transitions []string
}

func newFixture(t *testing.T, opts breakerstore.Options) *fixture {
	t.Helper()
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	f := &fixture{fault: faultstore.New(ms)}
	opts.OnStateChange = func(from, to breakerstore.State) {
		f.mu.Lock()
		f.transitions = append(f.transitions, from.String()+"->"+to.String())
		f.mu.Unlock()
	}
	var err error
	if f.breaker, err = breakerstore.New(f.fault, opts); err != nil {
		t.Fatal(err)
	}
	idleCPU(f.breaker)
	if f.limiter, err = floodgate.New(f.breaker, floodgate.Options{Timeout: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if f.rule, err = floodgate.NewRule("r", bounds.DefaultLog, time.Minute, floodgate.SlidingWindow); err != nil {
		t.Fatal(err)
	}
	return f
}

// idleCPU makes b read a CPU that is never short, so that a hung store's
// deadlines always count, however busy the machine that runs the tests.
func idleCPU(b *breakerstore.Store) { breakerstore.SetRunnable(b, func() int { return 0 }) }

// starvedCPU makes b read a CPU that is short: the run queues are long
// whenever it looks.
func starvedCPU(b *breakerstore.Store) { breakerstore.SetRunnable(b, func() int { return 1 << 20 }) }

func (f *fixture) allow(ctx context.Context) error {
	_, err := f.limiter.Allow(ctx, f.rule, "k")
	return err
}

func (f *fixture) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.transitions...)
}

// waitState polls until the breaker reports want; cooldowns in these
// tests are a few milliseconds long.
func waitState(t *testing.T, b *breakerstore.Store, want breakerstore.State) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); b.State() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("breaker is %v, want %v", b.State(), want)
		}
	}
}

func TestOpensAfterConsecutiveFailuresAndFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures uint32
		mode     faultstore.Mode
	}{
		{"errors, default threshold", 0, faultstore.Fail},
		{"errors, threshold 3", 3, faultstore.Fail},
		{"deadline exceeded (hung store)", 2, faultstore.Hang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, breakerstore.Options{Failures: tc.failures, Cooldown: time.Hour})
			want := int(tc.failures)
			if want == 0 {
				want = breakerstore.DefaultFailures
			}
			f.fault.Set(tc.mode)
			for i := range want {
				if f.breaker.State() != breakerstore.Closed {
					t.Fatalf("breaker %v after %d failures; it must stay closed until %d", f.breaker.State(), i, want)
				}
				if err := f.allow(context.Background()); !errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, breakerstore.ErrOpen) {
					t.Fatalf("failure %d: err = %v, want the store's own error", i+1, err)
				}
			}
			if got := f.breaker.State(); got != breakerstore.Open {
				t.Fatalf("breaker %v after %d consecutive failures, want open", got, want)
			}
			calls := f.fault.Calls()
			for range 100 {
				start := time.Now()
				err := f.allow(context.Background())
				if !errors.Is(err, breakerstore.ErrOpen) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
					t.Fatalf("open breaker: err = %v, want ErrOpen and ErrStoreUnavailable", err)
				}
				// The proof of failing fast is that the store is never
				// called (below); the time is a sanity bound only, far above
				// a scheduler's hiccup on a busy machine.
				if d := time.Since(start); d > time.Second {
					t.Fatalf("open breaker took %v to answer; it must fail fast", d)
				}
			}
			if n := f.fault.Calls() - calls; n != 0 {
				t.Fatalf("the store was called %d times while the breaker was open, want 0", n)
			}
		})
	}
}

func TestSuccessResetsTheFailureCount(t *testing.T) {
	f := newFixture(t, breakerstore.Options{Failures: 3, Cooldown: time.Hour})
	for range 5 {
		f.fault.Set(faultstore.Fail)
		_ = f.allow(context.Background())
		_ = f.allow(context.Background())
		f.fault.Set(faultstore.Pass)
		if err := f.allow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after failures that were never 3 in a row, want closed", got)
	}
}

func TestCallerCancellationIsNotAFailure(t *testing.T) {
	f := newFixture(t, breakerstore.Options{Failures: 2, Cooldown: time.Hour})
	f.fault.Set(faultstore.Hang)
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		if err := f.allow(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		cancel()
	}
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after 10 calls cancelled by their callers, want closed: a client that goes away says nothing about the store", got)
	}
	// A closed store is not a failure either.
	ms := memstore.New(memstore.Options{})
	ms.Close()
	b, _ := breakerstore.New(ms, breakerstore.Options{Failures: 1})
	l, _ := floodgate.New(b, floodgate.Options{})
	for range 3 {
		if _, err := l.Allow(context.Background(), f.rule, "k"); !errors.Is(err, floodgate.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	}
	if got := b.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v in front of a closed store, want closed", got)
	}
	// Nor is a call the store refuses as invalid: the caller's doing.
	for _, invalid := range []error{floodgate.ErrInvalidHit, floodgate.ErrInvalidRule} {
		b, _ = breakerstore.New(errStore{fmt.Errorf("somestore: %w", invalid)}, breakerstore.Options{Failures: 1})
		for range 3 {
			if _, err := b.Take(context.Background(), []floodgate.Hit{{Rule: f.rule, Key: "k"}}); !errors.Is(err, invalid) {
				t.Fatalf("err = %v, want %v", err, invalid)
			}
		}
		if got := b.State(); got != breakerstore.Closed {
			t.Fatalf("breaker %v after calls failing with %v, want closed", got, invalid)
		}
	}
}

// errStore fails every call with err.
type errStore struct{ err error }

func (s errStore) Take(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, s.err
}
func (s errStore) Peek(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, s.err
}
func (s errStore) Refund(context.Context, []floodgate.Receipt) error   { return s.err }
func (s errStore) Reset(context.Context, floodgate.Rule, string) error { return s.err }
func (s errStore) Renew(context.Context, []floodgate.Receipt) ([]floodgate.Stamp, error) {
	return nil, s.err
}

func TestHalfOpenProbesAndClosesWhenTheStoreRecovers(t *testing.T) {
	const cooldown = 20 * time.Millisecond
	f := newFixture(t, breakerstore.Options{Failures: 2, Cooldown: cooldown, Probes: 2})
	f.fault.Set(faultstore.Fail)
	_ = f.allow(context.Background())
	_ = f.allow(context.Background())
	if got := f.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v, want open", got)
	}

	// Still down at the first probe: open again for another cooldown.
	waitState(t, f.breaker, breakerstore.HalfOpen)
	if err := f.allow(context.Background()); errors.Is(err, breakerstore.ErrOpen) || err == nil {
		t.Fatalf("probe: err = %v, want the store's failure", err)
	}
	if got := f.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v after a failed probe, want open", got)
	}

	// Back: the probes pass and the breaker closes by itself.
	f.fault.Set(faultstore.Pass)
	waitState(t, f.breaker, breakerstore.HalfOpen)
	for i := range 2 {
		if err := f.allow(context.Background()); err != nil {
			t.Fatalf("probe %d: %v", i+1, err)
		}
	}
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after 2 successful probes, want closed", got)
	}
	want := []string{"closed->open", "open->half-open", "half-open->open", "open->half-open", "half-open->closed"}
	if got := f.history(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestHalfOpenLetsOnlyProbesThrough(t *testing.T) {
	f := newFixture(t, breakerstore.Options{Failures: 1, Cooldown: 5 * time.Millisecond})
	f.fault.Set(faultstore.Hang)
	_ = f.allow(context.Background())
	waitState(t, f.breaker, breakerstore.HalfOpen)

	// The one probe hangs until its budget ends; meanwhile every other
	// call fails fast.
	calls := f.fault.Calls()
	probe := make(chan error)
	go func() { probe <- f.allow(context.Background()) }()
	for f.fault.Calls() == calls {
		time.Sleep(100 * time.Microsecond)
	}
	for range 10 {
		if err := f.allow(context.Background()); !errors.Is(err, breakerstore.ErrOpen) {
			t.Fatalf("second call while half-open: err = %v, want ErrOpen", err)
		}
	}
	if err := <-probe; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe: err = %v, want a deadline exceeded", err)
	}
	if n := f.fault.Calls() - calls; n != 1 {
		t.Fatalf("half-open breaker let %d calls through, want 1", n)
	}
}

func TestEveryMethodGoesThroughTheBreaker(t *testing.T) {
	f := newFixture(t, breakerstore.Options{Failures: 1, Cooldown: time.Hour})
	ctx := context.Background()
	d, err := f.limiter.Allow(ctx, f.rule, "k")
	if err != nil {
		t.Fatal(err)
	}
	f.fault.Set(faultstore.Fail)
	_ = f.allow(ctx)
	calls := f.fault.Calls()
	for name, err := range map[string]error{
		"Refund": f.limiter.Refund(ctx, d),
		"Reset":  f.limiter.Reset(ctx, f.rule, "k"),
		"Peek":   func() error { _, err := f.limiter.Peek(ctx, floodgate.Hit{Rule: f.rule, Key: "k"}); return err }(),
	} {
		if !errors.Is(err, breakerstore.ErrOpen) {
			t.Errorf("%s: err = %v, want ErrOpen", name, err)
		}
	}
	if n := f.fault.Calls() - calls; n != 0 {
		t.Fatalf("store called %d times while open", n)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	if _, err := breakerstore.New(ms, breakerstore.Options{Cooldown: -time.Second}); !errors.Is(err, breakerstore.ErrInvalidOptions) {
		t.Errorf("negative cooldown: err = %v, want ErrInvalidOptions", err)
	}
	if _, err := breakerstore.New(nil, breakerstore.Options{}); !errors.Is(err, breakerstore.ErrInvalidOptions) {
		t.Errorf("nil store: err = %v, want ErrInvalidOptions", err)
	}
}

// A deadline missed because this process could not get a CPU (a flood of
// huge requests, bcrypt, a noisy neighbour) says nothing about the store:
// it must not open the breaker, or local load would make every route fail
// for everyone. The call still fails (the decision was not made in time).
// A deadline missed on a CPU that was not short still counts, and so does
// any other error.
func TestDeadlinesMissedForWantOfCPUAreNotFailures(t *testing.T) {
	f := newFixture(t, breakerstore.Options{Failures: 2, Cooldown: time.Hour})
	starvedCPU(f.breaker)
	f.fault.Set(faultstore.Hang)
	for i := range 10 {
		if err := f.allow(context.Background()); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
			t.Fatalf("call %d on a starved CPU: err = %v, want a deadline and ErrStoreUnavailable", i+1, err)
		}
	}
	// (The first miss only notes how many goroutines had waited so far.)
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after 10 deadlines missed on a starved CPU, want closed", got)
	}

	// A deadline that passed before the store was called is not the
	// store's either, even on an idle CPU.
	idleCPU(f.breaker)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for range 10 {
		if err := f.allow(expired); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("expired context: err = %v, want a deadline", err)
		}
	}
	if got := f.breaker.State(); got != breakerstore.Closed {
		t.Fatalf("breaker %v after 10 calls whose deadline had passed before the store was called, want closed", got)
	}

	// The store's own failures count, starved or not.
	starvedCPU(f.breaker)
	f.fault.Set(faultstore.Fail)
	for range 2 {
		_ = f.allow(context.Background())
	}
	if got := f.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v after 2 store errors on a starved CPU, want open: only deadlines can be the CPU's fault", got)
	}

	g := newFixture(t, breakerstore.Options{Failures: 2, Cooldown: time.Hour})
	g.fault.Set(faultstore.Hang)
	for range 2 {
		_ = g.allow(context.Background())
	}
	if got := g.breaker.State(); got != breakerstore.Open {
		t.Fatalf("breaker %v after 2 deadlines on an idle CPU, want open", got)
	}
}

// The runtime reading behind the CPU check sees real starvation: with many
// more busy goroutines than Ps, the run queues hold at least as many
// goroutines as there are Ps.
func TestReadRunnableSeesAStarvedCPU(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	b, err := breakerstore.New(ms, breakerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(time.Second)
	var seen atomic.Bool
	var wg sync.WaitGroup
	procs := runtime.GOMAXPROCS(0)
	for range 8 * procs {
		wg.Go(func() {
			for !seen.Load() && time.Now().Before(stop) {
			}
		})
	}
	most := 0
	for most < procs && time.Now().Before(stop) {
		time.Sleep(time.Millisecond)
		most = max(most, breakerstore.ReadRunnable(b))
	}
	seen.Store(true)
	wg.Wait()
	if most < procs {
		t.Fatalf("%d busy goroutines on %d Ps for a second: at most %d seen in the run queues, want %d or more", 8*procs, procs, most, procs)
	}
}

// An open breaker's error tells when it will probe again, so that an HTTP
// layer can send an honest Retry-After.
func TestOpenErrorTellsTheRemainingCooldown(t *testing.T) {
	const cooldown = time.Hour
	f := newFixture(t, breakerstore.Options{Failures: 1, Cooldown: cooldown})
	f.fault.Set(faultstore.Fail)
	_ = f.allow(context.Background())
	err := f.allow(context.Background())
	var ra interface{ RetryAfter() time.Duration }
	if !errors.As(err, &ra) || !errors.Is(err, breakerstore.ErrOpen) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want an error with RetryAfter() wrapping ErrOpen and ErrStoreUnavailable", err)
	}
	if in := ra.RetryAfter(); in <= cooldown-time.Minute || in > cooldown {
		t.Fatalf("RetryAfter() = %v just after opening, want nearly the cooldown, %v", in, cooldown)
	}
}
