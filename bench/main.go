// Command bench runs floodgate and its peers side by side, against the
// same redis-server, with the same keys and concurrency, and prints one
// table: decisions per second, p50 and p99 latency, allocations and CPU
// time per decision, each with its ratio to floodgate's reference row.
// Then it prints the Redis memory of one full key per algorithm and limit,
// and the error of the sliding-window counter against the exact log on one
// trace.
//
//	go run . -redis 127.0.0.1:6379 [-duration 2s] [-only REGEXP] [-goroutines 1,64]
//
// scripts/bench.sh starts a throwaway redis-server and runs it; see
// BENCHMARKS.md. Built with -tags base, as scripts/bench.sh builds it, the
// memory rows of floodgate's store run a second time as a baseline commit
// had them (base.go).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	addr := fs.String("redis", os.Getenv("FLOODGATE_REDIS_ADDR"), "address of the redis-server to run against (host:port); empty skips the Redis rows")
	redisDur := fs.Duration("duration", 2*time.Second, "measured time of each Redis cell (plus a fifth of it to warm up)")
	memDur := fs.Duration("mem-duration", time.Second, "measured time of each in-memory cell")
	only := fs.String("only", "", "run only the limiters whose name matches this regular expression (and the reference rows)")
	withRef := fs.Bool("ref", true, "with -only, run the reference rows too")
	rounds := fs.Int("rounds", 10, "rounds per row group: the limiters of a group take turns, each measured duration/rounds per round")
	gs := fs.String("goroutines", "1,64", "comma-separated goroutine counts")
	stores := fs.String("stores", "redis,memory", "comma-separated stores: redis, memory")
	wl := fs.String("workloads", "allowed,attack,mix", "comma-separated workloads: allowed, attack, mix (the peers' table); hot, zipf, cold, saturation, overadmit (escrow's table, issue 37)")
	withGuber := fs.Bool("gubernator", guberBuilt, "in escrow's table, a row of three gubernator v2 daemons on loopback with GLOBAL behaviour (a build with -tags gubernator)")
	overDir := fs.String("overadmit-dir", "", "where the overadmit workload writes its admission logs, for escrow-oracle check")
	overDur := fs.Duration("overadmit-duration", 5*time.Second, "how long the overadmit workload hammers each row")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	wanted := map[string]bool{}
	for _, w := range strings.Split(*wl, ",") {
		wanted[w] = true
	}
	var filter *regexp.Regexp
	if *only != "" {
		var err error
		if filter, err = regexp.Compile(*only); err != nil {
			return err
		}
	}
	var counts []int
	for _, s := range strings.Split(*gs, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return fmt.Errorf("bad goroutine count %q", s)
		}
		counts = append(counts, n)
	}

	fmt.Fprintf(out, "# floodgate benchmark: %s, %s/%s, %d CPUs (GOMAXPROCS %d)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if *addr != "" {
		v, err := redisVersion(*addr)
		if err != nil {
			return fmt.Errorf("redis at %s: %w", *addr, err)
		}
		fmt.Fprintf(out, "# redis-server %s at %s; Redis cells %v, memory cells %v, each measured in %d alternating rounds after a warm-up of a fifth of that\n", v, *addr, *redisDur, *memDur, *rounds)
	} else {
		fmt.Fprintln(out, "# no Redis address: Redis rows skipped")
	}
	fmt.Fprintf(out, "# %d keys; normal rule %d per %v, hot key %d per %v; latency sampled on every Redis decision and every 16th in-memory one\n", numKeys, normalLimit, window, hotLimit, window)
	fmt.Fprintln(out)

	var escrowWorks []string
	mainWanted := false
	for _, w := range strings.Split(*wl, ",") {
		if _, ok := escrowWorkloads[w]; ok || w == "saturation" || w == "overadmit" {
			escrowWorks = append(escrowWorks, w)
		} else {
			mainWanted = true
		}
	}
	if len(escrowWorks) > 0 {
		if *addr == "" {
			return fmt.Errorf("workloads %v need -redis", escrowWorks)
		}
		if err := escrowTable(out, *addr, escrowWorks, *redisDur, *withGuber); err != nil {
			return fmt.Errorf("escrow: %w", err)
		}
		if wanted["overadmit"] {
			if *overDir == "" {
				return errors.New("the overadmit workload needs -overadmit-dir")
			}
			fmt.Fprintln(out)
			if err := overAdmissions(out, *addr, *overDir, *overDur, *withGuber); err != nil {
				return fmt.Errorf("overadmit: %w", err)
			}
		}
		if !mainWanted {
			return nil
		}
		fmt.Fprintln(out)
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var readRedis func() redisTimes
	if *addr != "" {
		read, closeFn, err := redisTimesReader(*addr)
		if err != nil {
			return err
		}
		defer closeFn()
		readRedis = read
	}
	fmt.Fprintln(tw, "store\tworkload\tgoroutines\tlimiter\talgorithm\tdecisions/s\tx fg\tp50\tx fg\tp99\tx fg\tallocs/op\tCPU/op\tx fg\tRedis/op\tx fg\t")
	var failures []string
	for _, redis := range []bool{true, false} {
		if redis && *addr == "" || redis && !strings.Contains(*stores, "redis") || !redis && !strings.Contains(*stores, "memory") {
			continue
		}
		for _, w := range workloads {
			if !wanted[w.name] {
				continue
			}
			for _, g := range counts {
				var group []peer
				for _, p := range peers {
					if p.redis == redis && (filter == nil || (p.ref || p.base) && *withRef || filter.MatchString(p.name)) {
						group = append(group, p)
					}
				}
				d := *memDur
				if redis {
					d = *redisDur
				}
				results := runGroup(group, w, g, *addr, d, *rounds, readRedis)
				var ref *result
				for i, p := range group {
					if p.ref {
						ref = &results[i]
					}
				}
				store := "memory"
				if redis {
					store = "redis"
				}
				for i, p := range group {
					r := results[i]
					if r.err != nil {
						failures = append(failures, fmt.Sprintf("%s %s %d goroutines, %s: %v", store, w.name, g, p.name, r.err))
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\tFAILED (%d)\t\t\t\t\t\t\t\t\t\t\t\n", store, w.name, g, p.name, p.algorithm, len(failures))
						continue
					}
					redisOp, redisRatio := "-", "-"
					if redis {
						redisOp = lat(r.redisCmds)
						redisRatio = ratio(float64(r.redisCmds), ref, func(r result) float64 { return float64(r.redisCmds) })
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t\n",
						store, w.name, g, p.name, p.algorithm,
						count(r.perSec()), ratio(r.perSec(), ref, result.perSec),
						lat(r.p50), ratio(float64(r.p50), ref, func(r result) float64 { return float64(r.p50) }),
						lat(r.p99), ratio(float64(r.p99), ref, func(r result) float64 { return float64(r.p99) }),
						r.allocs(),
						lat(r.cpu+r.redisCPU), ratio(float64(r.cpu+r.redisCPU), ref, func(r result) float64 { return float64(r.cpu + r.redisCPU) }),
						redisOp, redisRatio)
				}
				fmt.Fprintf(os.Stderr, "bench: %s %s %d goroutines done\n", store, w.name, g)
			}
		}
	}
	tw.Flush()
	if *addr != "" && strings.Contains(*stores, "redis") {
		fmt.Fprintln(out)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := memoryTable(ctx, *addr, out); err != nil {
			return fmt.Errorf("memory table: %w", err)
		}
	}
	fmt.Fprintln(out)
	if err := counterError(out); err != nil {
		return fmt.Errorf("counter error: %w", err)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "x fg: the figure divided by floodgate's in the same store, workload and goroutine count (above 1 is more decisions/s, or a longer latency).")
	fmt.Fprintln(out, "CPU/op: CPU time per decision of the benchmark process (client, runtime included) plus, for Redis rows, of redis-server: the cost that decides throughput on a busy machine.")
	fmt.Fprintln(out, "Redis/op: Redis's time per decision in its commands (INFO commandstats: the script calls, or every command of a limiter that calls none), what caps every row on Redis's one thread.")
	if len(failures) > 0 {
		fmt.Fprintln(out)
		for i, f := range failures {
			fmt.Fprintf(out, "FAILED (%d): %s\n", i+1, f)
		}
		return fmt.Errorf("%d cells failed", len(failures))
	}
	return nil
}

// newPrefix returns a fresh prefix for a limiter's keys (Redis keys, and
// the key set): short, so that prefixed keys stay below the length from
// which floodgate keeps a digest of a key instead of the key.
func newPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "fgbench:" + hex.EncodeToString(b[:]) + ":"
}

// runGroup builds a fresh limiter of each peer, warms each up (a fifth of
// d), then measures them in turns: rounds rounds of d/rounds each.
func runGroup(group []peer, w workload, g int, addr string, d time.Duration, rounds int, readRedis func() redisTimes) []result {
	runs := make([]*cellRun, len(group))
	results := make([]result, len(group))
	for i, p := range group {
		prefix := newPrefix()
		l, err := p.build(addr, prefix)
		if err != nil {
			results[i].err = err
			continue
		}
		defer l.Close()
		keys, hot := keySet(prefix)
		every, rtimes := uint64(16), (func() redisTimes)(nil)
		if p.redis {
			every, rtimes = 1, readRedis
		}
		runs[i] = newCellRun(l, w, keys, hot, g, every, rtimes)
		runs[i].phase(d/5, false)
	}
	for range rounds {
		for _, c := range runs {
			if c != nil {
				c.phase(d/time.Duration(rounds), true)
			}
		}
	}
	for i, c := range runs {
		if c != nil {
			results[i] = c.result()
		}
	}
	return results
}

func ratio(v float64, ref *result, f func(result) float64) string {
	if ref == nil || ref.err != nil || f(*ref) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/f(*ref))
}

func count(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func lat(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
}
