package main

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// numKeys is how many distinct keys the allowed traffic spreads over.
const numKeys = 10_000

// Rules every limiter is built with: normal keys get a limit that the
// benchmark never reaches (so workload "allowed" is allowed throughout),
// the hot key a tiny one (so workload "attack" is denied after its first
// hotLimit requests).
const (
	normalLimit = 1_000_000
	hotLimit    = 10
	window      = time.Minute
)

// limiter is what every floodgate configuration and every peer is wrapped
// in: one decision for key, under the hot rule when hot is set.
type limiter interface {
	Allow(ctx context.Context, key string, hot bool) (bool, error)
	Close()
}

// workload is a traffic pattern.
type workload struct {
	name string
	// hot reports whether the i-th request of a goroutine goes to the hot
	// key.
	hot func(i uint64) bool
	// spread reports whether the workload is meant to touch all numKeys
	// keys, which the guard checks.
	spread bool
	// allDenied / allAllowed describe what the workload must see after
	// warm-up, which run checks, so that a label cannot lie.
	allAllowed, mostlyDenied bool
}

var workloads = []workload{
	{name: "allowed", hot: func(uint64) bool { return false }, spread: true, allAllowed: true},
	{name: "attack", hot: func(uint64) bool { return true }, mostlyDenied: true},
	{name: "mix", hot: func(i uint64) bool { return i%2 == 0 }, spread: true},
}

// keySet returns the numKeys normal keys and the hot key of one run, under
// a prefix of its own so that runs never share state on one Redis.
func keySet(prefix string) ([]string, string) {
	keys := make([]string, numKeys)
	seen := make(map[string]bool, numKeys)
	for i := range keys {
		keys[i] = prefix + "user-" + strconv.Itoa(i)
		seen[keys[i]] = true
	}
	if len(seen) != numKeys {
		panic(fmt.Sprintf("key set holds %d distinct keys, want %d", len(seen), numKeys))
	}
	return keys, prefix + "hot"
}

// stride walks the key set: coprime with numKeys, so that every goroutine
// visits all keys once per numKeys requests, in an order that is not
// sequential.
const stride = 7919

// result is one measured cell of the table.
type result struct {
	ops        uint64
	elapsed    time.Duration
	allowed    uint64
	mallocs    uint64
	p50, p99   time.Duration
	keysTouch  int
	err        error
	sampleRate int
	// cpu is the CPU time the benchmark process spent (all goroutines,
	// the runtime included) and redisCPU the redis-server's, both per
	// decision: unlike throughput, they hardly move when other processes
	// share the machine. redisCmds is Redis's time in the limiter's
	// commands per decision (redisTimes.commands).
	cpu, redisCPU, redisCmds time.Duration
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }
func (r result) allocs() float64 { return float64(r.mallocs) / float64(r.ops) }

// cellRun drives one limiter with g goroutines, phase after phase, and
// accumulates what the measured phases saw. The table runs the limiters
// of one row group in alternating rounds, so that a slow moment of a
// shared machine weighs on all of them alike.
type cellRun struct {
	l           limiter
	w           workload
	keys        []string
	hotKey      string
	g           int
	sampleEvery uint64
	redisTimes  func() redisTimes // nil for in-memory limiters

	hist    hist
	born    time.Time // when the limiter's first phase started
	touched []bool
	next    []uint64 // per goroutine: requests so far, to normal keys
	seq     []uint64 // per goroutine: requests so far
	r       result
}

func newCellRun(l limiter, w workload, keys []string, hotKey string, g int, sampleEvery uint64, readRedis func() redisTimes) *cellRun {
	return &cellRun{l: l, w: w, keys: keys, hotKey: hotKey, g: g, sampleEvery: sampleEvery, redisTimes: readRedis,
		touched: make([]bool, numKeys), next: make([]uint64, g), seq: make([]uint64, g)}
}

// phase runs the goroutines for d; a measured phase adds to the result.
func (c *cellRun) phase(d time.Duration, measure bool) {
	if c.r.err != nil {
		return
	}
	if c.born.IsZero() {
		c.born = time.Now()
	}
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	hists := make([]*hist, c.g)
	touched := make([][]bool, c.g)
	ops := make([]uint64, c.g)
	allowed := make([]uint64, c.g)
	errs := make([]error, c.g)
	start := make(chan struct{})
	for gi := range c.g {
		hists[gi] = new(hist)
		touched[gi] = make([]bool, numKeys)
		wg.Go(func() {
			h, seen := hists[gi], touched[gi]
			off := uint64(gi) * (numKeys / uint64(c.g))
			i, n := c.seq[gi], c.next[gi] // requests, requests to normal keys
			var ok, done uint64
			<-start
			for !stop.Load() {
				hot := c.w.hot(i)
				key := c.hotKey
				var idx uint64
				if !hot {
					idx = (off + n*stride) % numKeys
					key = c.keys[idx]
					n++
				}
				var t0 time.Time
				sample := i%c.sampleEvery == 0
				if sample {
					t0 = time.Now()
				}
				a, err := c.l.Allow(ctx, key, hot)
				if sample {
					h.add(time.Since(t0))
				}
				if err != nil {
					errs[gi] = err
					break
				}
				if !hot {
					seen[idx] = true
				}
				if a {
					ok++
				}
				i++
				done++
			}
			c.seq[gi], c.next[gi] = i, n
			ops[gi], allowed[gi] = done, ok
		})
	}
	var before, after runtime.MemStats
	var cpu0, cpu1 time.Duration
	var redis0, redis1 redisTimes
	if measure {
		runtime.GC()
		runtime.ReadMemStats(&before)
		cpu0 = processCPU()
		if c.redisTimes != nil {
			redis0 = c.redisTimes()
		}
	}
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	for gi := range c.g {
		if errs[gi] != nil && c.r.err == nil {
			c.r.err = errs[gi]
		}
	}
	if !measure {
		return
	}
	cpu1 = processCPU()
	if c.redisTimes != nil {
		redis1 = c.redisTimes()
	}
	runtime.ReadMemStats(&after)
	c.r.elapsed += elapsed
	for gi := range c.g {
		c.r.ops += ops[gi]
		c.r.allowed += allowed[gi]
		c.hist.merge(hists[gi])
		for k, t := range touched[gi] {
			c.touched[k] = c.touched[k] || t
		}
	}
	c.r.mallocs += after.Mallocs - before.Mallocs
	c.r.cpu += cpu1 - cpu0
	rd := redis1.sub(redis0)
	c.r.redisCPU += rd.cpu
	c.r.redisCmds += rd.commands()
}

// result returns the accumulated measurement, checked against the
// workload's claims.
func (c *cellRun) result() result {
	r := c.r
	r.p50, r.p99 = c.hist.quantile(0.50), c.hist.quantile(0.99)
	r.sampleRate = int(c.sampleEvery)
	if r.ops > 0 {
		r.cpu /= time.Duration(r.ops)
		r.redisCPU /= time.Duration(r.ops)
		r.redisCmds /= time.Duration(r.ops)
	}
	for _, t := range c.touched {
		if t {
			r.keysTouch++
		}
	}
	if r.err != nil {
		return r
	}
	// The guards: a cell that did not do what its label says fails.
	switch w := c.w; {
	case r.ops == 0:
		r.err = fmt.Errorf("no decision made")
	case w.spread && r.keysTouch < numKeys:
		r.err = fmt.Errorf("touched %d distinct keys, the workload claims %d", r.keysTouch, numKeys)
	case w.allAllowed && r.allowed != r.ops:
		r.err = fmt.Errorf("%d of %d decisions denied in the all-allowed workload", r.ops-r.allowed, r.ops)
	case w.mostlyDenied && float64(r.allowed) > hotLimit*(1+time.Since(c.born).Seconds()/window.Seconds()):
		// The warm-up spends the hot key's limit; a token bucket then
		// refills one request every window/hotLimit, so a few may pass.
		r.err = fmt.Errorf("%d of %d attack decisions allowed in %v, more than the hot key's %d per %v", r.allowed, r.ops, time.Since(c.born).Round(time.Second), hotLimit, window)
	}
	return r
}

// hist is a log-linear latency histogram: 16 sub-buckets per power of two
// of nanoseconds, about 6% resolution.
type hist struct{ n [64 * 16]uint64 }

func bucket(ns uint64) int {
	if ns < 16 {
		return int(ns)
	}
	e := bits.Len64(ns) - 1 // ns in [2^e, 2^(e+1))
	m := (ns >> (e - 4)) & 15
	return (e-3)*16 + int(m)
}

// lower returns the smallest value of bucket b.
func lower(b int) uint64 {
	if b < 16 {
		return uint64(b)
	}
	e := b/16 + 3
	m := uint64(b % 16)
	return (16 + m) << (e - 4)
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.n[bucket(uint64(d))]++
}

func (h *hist) merge(o *hist) {
	for i, v := range o.n {
		h.n[i] += v
	}
}

// quantile returns the q-quantile, as the midpoint of its bucket.
func (h *hist) quantile(q float64) time.Duration {
	var total uint64
	for _, v := range h.n {
		total += v
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	var acc uint64
	for b, v := range h.n {
		acc += v
		if acc > rank {
			lo, hi := lower(b), lower(b+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
}

// processCPU returns the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
