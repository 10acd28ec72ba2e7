package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/rueidis"
)

// Escrow (issue 37): floodgate's direct path (one Redis call a decision,
// group commit aside) beside escrow (leases of quota in memory), with 64
// goroutines over 3 Limiters (replicas, each on its own store and
// connections) on one Redis, in three workloads:
//   - hot: every request on one key;
//   - zipf: keys drawn from a Zipf law, s = 1.1 over 100,000 keys;
//   - cold: a new key per request.
//
// And saturation: one key hammered past its limit, 10 s windows, δ = 100 ms:
// the share of the limit that the fleet admits.

// escrowWorkloads are the workloads of the escrow table, by name.
var escrowWorkloads = map[string]func(g int, rng *rand.Rand, zipf *rand.Zipf, i uint64) string{
	"hot": func(int, *rand.Rand, *rand.Zipf, uint64) string { return "hot" },
	"zipf": func(_ int, _ *rand.Rand, z *rand.Zipf, _ uint64) string {
		return "z" + strconv.FormatUint(z.Uint64(), 10)
	},
	"cold": func(g int, _ *rand.Rand, _ *rand.Zipf, i uint64) string {
		return "c" + strconv.Itoa(g) + "-" + strconv.FormatUint(i, 10)
	},
}

const (
	escrowReplicas   = 3
	escrowGoroutines = 64
	escrowPeriod     = 100 * time.Millisecond
	zipfKeys         = 100_000
)

// escrowRule is never reached in the table's runs (a token bucket of a
// million a second, with a burst of ten hours of it), so every decision
// is allowed: the table measures the cost of a decision, not of a
// denial (held denials cost even less).
var escrowRule = floodgate.Rule{Name: "escrow", Limit: 3_600_000_000, Window: time.Hour, Algorithm: floodgate.TokenBucket, Burst: 36_000_000_000}

// escrowRow is one row: a way to build the replicas.
type escrowRow struct {
	name   string
	escrow bool
	memory bool // one Limiter on a memstore, the in-memory reference
	guber  bool // three gubernator v2 daemons, GLOBAL behaviour (guber.go)
}

var escrowRows = []escrowRow{
	{name: "floodgate direct"},
	{name: "floodgate escrow", escrow: true},
	{name: "floodgate memstore", memory: true},
	{name: "gubernator v2 GLOBAL", guber: true},
}

// A decider decides one request of escrowRule's key: a replica of a row.
type decider func(ctx context.Context, key string) (allowed bool, err error)

// buildReplicas returns the deciders of a row (its Limiters, or a client
// of each gubernator daemon) and a func that closes them.
func buildReplicas(row escrowRow, addr, prefix string) ([]decider, func(), error) {
	if row.guber {
		asks, closeG, err := guberReplicas(escrowReplicas, escrowRule.Limit, escrowRule.Window, false)
		if err != nil {
			return nil, nil, err
		}
		var ds []decider
		for _, ask := range asks {
			ds = append(ds, func(ctx context.Context, key string) (bool, error) {
				ok, _, err := ask(ctx, prefix+key)
				return ok, err
			})
		}
		return ds, closeG, nil
	}
	ls, closeAll, err := buildLimiters(row, addr, prefix)
	if err != nil {
		return nil, nil, err
	}
	ds := make([]decider, len(ls))
	for i, l := range ls {
		ds[i] = func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, escrowRule, key)
			return d.Allowed, err
		}
	}
	return ds, closeAll, nil
}

// buildLimiters returns the Limiters of a floodgate row and a func that
// closes them.
func buildLimiters(row escrowRow, addr, prefix string) ([]*floodgate.Limiter, func(), error) {
	if row.memory {
		s := memstore.New(memstore.Options{})
		l, err := floodgate.New(s, floodgate.Options{})
		if err != nil {
			return nil, nil, err
		}
		return []*floodgate.Limiter{l}, func() { s.Close() }, nil
	}
	var ls []*floodgate.Limiter
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for range escrowReplicas {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := redisstore.New(ctx, redisstore.Options{URL: "redis://" + addr, Prefix: prefix})
		cancel()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opts := floodgate.Options{Timeout: 2 * time.Second}
		if row.escrow {
			opts.Escrow = floodgate.Escrow{Period: escrowPeriod}
		}
		l, err := floodgate.New(s, opts)
		if err != nil {
			s.Close()
			closeAll()
			return nil, nil, err
		}
		ls = append(ls, l)
		closers = append(closers, func() { l.Close(); s.Close() })
	}
	return ls, closeAll, nil
}

// escrowCell is what one row measured in one workload.
type escrowCell struct {
	ops, allowed uint64
	elapsed      time.Duration
	commands     int64 // Redis commands in the measured time
	err          error
}

// escrowPhase drives the Limiters with 64 goroutines (round-robin over
// them) for d, adding to cell when measure is set.
func escrowPhase(cell *escrowCell, ls []decider, work string, d time.Duration, calls func() int64, measure bool) {
	pick := escrowWorkloads[work]
	{
		var stop atomic.Bool
		var ops, allowed atomic.Uint64
		var errOnce sync.Once
		var wg sync.WaitGroup
		var c0 int64
		if measure && calls != nil {
			c0 = calls()
		}
		t0 := time.Now()
		for g := range escrowGoroutines {
			l := ls[g%len(ls)]
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
				z := rand.NewZipf(rng, 1.1, 1, zipfKeys-1)
				var n, ok uint64
				base := uint64(time.Now().UnixNano()) // cold keys never repeat across phases
				for i := uint64(0); !stop.Load(); i++ {
					allowed, err := l(context.Background(), pick(g, rng, z, base+i))
					if err != nil {
						errOnce.Do(func() { cell.err = err })
						return
					}
					n++
					if allowed {
						ok++
					}
				}
				ops.Add(n)
				allowed.Add(ok)
			})
		}
		time.Sleep(d)
		stop.Store(true)
		wg.Wait()
		if measure {
			cell.elapsed += time.Since(t0)
			cell.ops += ops.Load()
			cell.allowed += allowed.Load()
			if calls != nil {
				cell.commands += calls() - c0
			}
		}
	}
}

// escrowRounds is how many alternating rounds the rows of a workload
// take turns in, so that a slow moment of a shared machine weighs on all
// of them alike.
const escrowRounds = 5

// redisCalls returns a func that reads how many commands clients sent
// the redis-server at addr so far: its script calls (INFO commandstats:
// EVALSHA, EVAL and their read-only forms), the only commands a
// decision sends. (INFO counts the commands a script runs on their own
// lines too, so the other lines are not added.)
func redisCalls(addr string) (func() int64, func(), error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	return func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			return 0
		}
		var n int64
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
			switch {
			case !ok || !strings.HasPrefix(strings.TrimSpace(line), "cmdstat_"):
				continue
			case name != "evalsha" && name != "eval" && name != "evalsha_ro" && name != "eval_ro":
				continue
			}
			if v, ok := strings.CutPrefix(strings.Split(rest, ",")[0], "calls="); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
		return n
	}, c.Close, nil
}

// escrowTable prints the escrow table for the workloads asked for, and
// the saturation rows when asked.
func escrowTable(out io.Writer, addr string, works []string, d time.Duration, withGuber bool) error {
	calls, closeCalls, err := redisCalls(addr)
	if err != nil {
		return err
	}
	defer closeCalls()
	fmt.Fprintf(out, "# escrow (issue 37): %d goroutines over %d Limiters on one Redis (the memstore row: one Limiter; the gubernator row: 3 gubernator v2 daemons on loopback, peers of each other, GLOBAL behaviour), lease period %v, rule %d per %v (never reached); %v measured after %v\n",
		escrowGoroutines, escrowReplicas, escrowPeriod, escrowRule.Limit, escrowRule.Window, d, d/5)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tlimiter\tdecisions/s\tx direct\tx memstore\tallowed\tRedis calls/decision\t")
	for _, w := range works {
		if w == "saturation" || w == "overadmit" {
			continue
		}
		cells := make([]escrowCell, len(escrowRows))
		built := make([][]decider, len(escrowRows))
		// Each workload's replicas are closed before the next starts, so
		// that none of theirs (an escrow's sweeper, a gubernator daemon)
		// runs beside another workload's rows.
		var closers []func()
		closeRows := func() {
			for _, c := range closers {
				c()
			}
		}
		for i, row := range escrowRows {
			if row.memory && w != "hot" || row.guber && !withGuber {
				continue
			}
			ls, closeAll, err := buildReplicas(row, addr, newPrefix())
			if err != nil {
				closeRows()
				return err
			}
			closers = append(closers, closeAll)
			built[i] = ls
			escrowPhase(&cells[i], ls, w, d/5, nil, false)
		}
		for range escrowRounds {
			for i, row := range escrowRows {
				if built[i] == nil {
					continue
				}
				c := calls
				if row.memory || row.guber {
					c = nil
				}
				escrowPhase(&cells[i], built[i], w, d/escrowRounds, c, true)
			}
		}
		rate := func(c escrowCell) float64 { return float64(c.ops) / c.elapsed.Seconds() }
		for i, row := range escrowRows {
			c := cells[i]
			if row.memory && w != "hot" || row.guber && !withGuber {
				continue
			}
			if c.err != nil {
				fmt.Fprintf(tw, "%s\t%s\tFAILED: %v\t\t\t\t\t\n", w, row.name, c.err)
				continue
			}
			xmem := "-"
			if w == "hot" && cells[2].ops > 0 {
				xmem = fmt.Sprintf("%.2f", rate(c)/rate(cells[2]))
			}
			cmds := "-"
			if !row.memory && !row.guber {
				cmds = fmt.Sprintf("%.5f", float64(c.commands)/float64(c.ops))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%.1f%%\t%s\t\n", w, row.name, count(rate(c)), rate(c)/rate(cells[0]), xmem,
				100*float64(c.allowed)/float64(c.ops), cmds)
		}
		closeRows()
	}
	tw.Flush()
	for _, w := range works {
		if w == "saturation" {
			fmt.Fprintln(out)
			return saturation(out, addr)
		}
	}
	return nil
}

// saturation hammers one key past its limit (2,000 per 10 s) from 64
// goroutines over 3 Limiters with escrow (δ = 100 ms) for two windows,
// and reports the admissions against what an exact limiter admits in
// that time from a fresh key: two limits for a sliding log (one at the
// start, one a window later), a burst and two windows' rate for a token
// bucket (burst = limit).
func saturation(out io.Writer, addr string) error {
	const limit, w = 2000, 10 * time.Second
	fmt.Fprintf(out, "# saturation: one key, %d per %v, %d goroutines over %d Limiters with escrow (δ %v), for %v\n", limit, w, escrowGoroutines, escrowReplicas, escrowPeriod, 2*w)
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket} {
		r := floodgate.Rule{Name: "saturated", Limit: limit, Window: w, Algorithm: alg}
		ls, closeAll, err := buildLimiters(escrowRows[1], addr, newPrefix())
		if err != nil {
			return err
		}
		var stop atomic.Bool
		var mu sync.Mutex
		var times []time.Time
		var wg sync.WaitGroup
		t0 := time.Now()
		for g := range escrowGoroutines {
			l := ls[g%len(ls)]
			wg.Go(func() {
				for !stop.Load() {
					d, err := l.Allow(context.Background(), r, "k")
					if err == nil && d.Allowed {
						at := time.Now()
						mu.Lock()
						times = append(times, at)
						mu.Unlock()
					}
				}
			})
		}
		time.Sleep(2 * w)
		stop.Store(true)
		wg.Wait()
		closeAll()
		var n int
		for _, at := range times {
			if at.Sub(t0) < 2*w {
				n++
			}
		}
		ideal := 2 * limit
		if alg == floodgate.TokenBucket {
			ideal = 3 * limit
		}
		fmt.Fprintf(out, "saturation %v: %d admitted in %v, %.1f%% of the %d an exact limiter admits\n", alg, n, 2*w, 100*float64(n)/float64(ideal), ideal)
	}
	return nil
}
