package breakerstore

import (
	"context"
	"errors"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Whose deadline was it? A call that misses its deadline counts against
// the store only when the store was slow: see "What counts as a failure"
// in the package documentation for the rules, and why. clock keeps what
// they need.

// clock judges the deadline misses of one Store. Its methods are safe for
// concurrent use.
type clock struct {
	base     time.Time    // the zero of the times below (monotonic)
	budgets  budgets      // the largest budgets calls had at their start
	answer   atomic.Int64 // when the store last answered a call
	readAt   atomic.Int64 // when a call's start last read the run queues
	long     atomic.Bool  // what that reading found: run queues of procs or more
	procs    int          // GOMAXPROCS when the breaker was built
	runnable func() int   // goroutines in the run queues now; tests replace it
	samples  sync.Pool    // of *[1]metrics.Sample, for readRunnable
}

// readEvery is the least time between two readings of the run queues at
// calls' starts: a call sees one at most this old.
const readEvery = time.Millisecond

func (c *clock) init() {
	c.base = time.Now()
	c.procs = runtime.GOMAXPROCS(0)
	c.runnable = c.readRunnable
	c.readAt.Store(-int64(readEvery)) // the first call reads
}

// now returns the time since c.base, never 0.
func (c *clock) now() int64 { return int64(time.Since(c.base)) + 1 }

// call is what start notes of a call.
type call struct {
	at       int64         // when it started
	deadline bool          // its context has a deadline
	budget   time.Duration // the time left then (negative when past)
	long     bool          // the run queues were long then
}

// start notes a call under ctx that starts now.
func (c *clock) start(ctx context.Context) call {
	cl := call{at: c.now()}
	if d, ok := ctx.Deadline(); ok {
		cl.deadline, cl.budget = true, time.Until(d)
		c.budgets.note(cl.at, cl.budget)
	}
	if r := c.readAt.Load(); cl.at-r >= int64(readEvery) && c.readAt.CompareAndSwap(r, cl.at) {
		c.long.Store(c.starved())
	}
	cl.long = c.long.Load()
	return cl
}

// budgetPeriod is how long a budget counts as the largest: a call's
// budget is forgotten 1 to 2 periods after it started, so that one
// caller with a long deadline (a direct call, a Limiter without a
// Timeout) does not excuse every later miss.
const budgetPeriod = 10 * time.Second

// budgets keeps the largest budget of the calls that started in this
// period and in the one before.
type budgets struct {
	mu     sync.Mutex
	period atomic.Int64 // the period of cur: start time / budgetPeriod
	cur    atomic.Int64 // the largest budget of this period
	prev   atomic.Int64 // the largest of the period before
}

// note notes the budget b of a call that started at.
func (bs *budgets) note(at int64, b time.Duration) {
	if p := at / int64(budgetPeriod); p != bs.period.Load() {
		bs.mu.Lock()
		if q := bs.period.Load(); p > q {
			if p == q+1 {
				bs.prev.Store(bs.cur.Load())
			} else {
				bs.prev.Store(0)
			}
			bs.cur.Store(0)
			bs.period.Store(p)
		}
		bs.mu.Unlock()
	}
	for {
		if m := bs.cur.Load(); int64(b) <= m || bs.cur.CompareAndSwap(m, int64(b)) {
			return
		}
	}
}

// largest returns the largest budget of this period and the one before,
// as of now.
func (bs *budgets) largest(now int64) time.Duration {
	switch p, q := now/int64(budgetPeriod), bs.period.Load(); p {
	case q:
		return time.Duration(max(bs.cur.Load(), bs.prev.Load()))
	case q + 1:
		return time.Duration(bs.cur.Load())
	}
	return 0 // no call for a period
}

// answered notes that the store answered a call now.
func (c *clock) answered() {
	now := c.now()
	for {
		if a := c.answer.Load(); now <= a || c.answer.CompareAndSwap(a, now) {
			return
		}
	}
}

// notTheStores reports whether err, the failure of the call cl under ctx,
// is a missed deadline that the store cannot be blamed for: the call
// started with less than half the largest budget any call had (its
// deadline was spent, or nearly, before the store was called), the store
// answered another call while this one waited, or the Go scheduler's run
// queues were long when the call started or when it missed (this process
// was short of CPU).
func (c *clock) notTheStores(ctx context.Context, cl call, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false // an error the store returned
	}
	if !cl.deadline {
		return false // the store's own deadline: the caller set none
	}
	switch {
	case cl.budget < c.budgets.largest(c.now())/2:
		return true // spent before the store was called
	case c.answer.Load() > cl.at:
		return true // the store was answering
	}
	return cl.long || c.starved()
}

// starved reports whether this process is short of CPU now: at least as
// many goroutines wait in the Go scheduler's run queues as there are Ps.
func (c *clock) starved() bool { return c.runnable() >= c.procs }

// readRunnable returns how many goroutines wait in the Go scheduler's run
// queues now (/sched/goroutines/runnable:goroutines). It takes the
// scheduler's lock for well under a microsecond and does not allocate. A
// runtime without the metric reads as a CPU never short.
func (c *clock) readRunnable() int {
	p, _ := c.samples.Get().(*[1]metrics.Sample)
	if p == nil {
		p = &[1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	}
	defer c.samples.Put(p)
	metrics.Read(p[:])
	if p[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(min(p[0].Value.Uint64(), 1<<30))
}
