// Command rlsbench runs floodgate's rate-limit service and
// envoyproxy/ratelimit side by side, with a null RLS server as the
// ceiling, and measures them under one gRPC load generator: decisions
// per second, p50 and p99 latency, CPU time per decision of the service
// process (from /proc/PID/stat) and its RSS. The services take turns in
// rounds, share one redis-server (which rlsbench starts) and one
// configuration directory. Then, with -outage, it freezes Redis
// (SIGSTOP) for 10 seconds under load, kills it and starts it again, and
// reports what each service answered meanwhile.
//
//	rlsbench -floodgate BIN -envoy BIN -config bench/rls [-base BIN] [-duration 6s] [-rounds 3] [-outage]
//
// Rows:
//
//	floodgate fixed window          the envoy-format file unchanged
//	floodgate sliding window        the same file with "algorithm: sliding_window" added to the domain
//	floodgate token bucket          the same file with "algorithm: token_bucket"
//	floodgate fixed window (NAME)   with -base: the fixed window of another floodgate binary
//	floodgate sliding window (NAME) and its sliding window, NAME from -base-name
//	envoyproxy/ratelimit            the unchanged file, with -envoy-env's settings
//	null                            "rlsbench null": OK to every descriptor, no store
//
// Workloads: allowed (one descriptor of 10,000 values, never over its
// limit), attack (one hot value far over its limit: the denial caches of
// both services answer it) and 3 descriptors per request. scripts/bench.sh
// (via scripts/bench-rls.sh) builds the binaries and runs it; see
// BENCHMARKS.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "null" {
		err = serveNull(os.Args[2:])
	} else {
		err = mainErr(os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// A row is one service under test.
type row struct {
	name string
	p    *proc
	addr string
	ld   *loader
	// per workload
	t   map[string]*tally
	cpu map[string]time.Duration
	rss map[string]int64
}

type options struct {
	floodgate, envoy, redisServer string
	baseBin, baseName, baseEnv    string
	config                        string
	duration, warmup, timeout     time.Duration
	rounds, callers, conns        int
	values                        int
	workloads, rows               string
	envoyEnv, floodgateEnv        string
	localCacheBytes               int
	outage, perf                  bool
	perfSeconds                   int
}

func mainErr(args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("rlsbench", flag.ContinueOnError)
	fs.StringVar(&o.floodgate, "floodgate", "", "the floodgate binary (go build ./cmd/floodgate)")
	fs.StringVar(&o.baseBin, "base", "", "another floodgate binary (a baseline, or a change under trial): adds its fixed-window and sliding-window rows")
	fs.StringVar(&o.baseName, "base-name", "base", "the name of -base's rows: floodgate fixed window (NAME)")
	fs.StringVar(&o.baseEnv, "base-env", "", "-base's rows' extra settings, after -floodgate-env's, comma-separated NAME=VALUE (a setting under trial: -base of the same binary, e.g. GOGC=200)")
	fs.StringVar(&o.envoy, "envoy", "", "envoyproxy/ratelimit's service_cmd binary")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.config, "config", "", "the RUNTIME_ROOT: a directory holding ratelimit/config/*.yaml")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "measured time of each row in each workload, split over the rounds")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time of each row before each workload")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "the deadline of each call")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds: the rows take turns, each measured duration/rounds per round")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers")
	fs.IntVar(&o.conns, "conns", 4, "gRPC connections the callers share, per service")
	fs.IntVar(&o.values, "values", 10000, "distinct descriptor values")
	fs.StringVar(&o.workloads, "workloads", "allowed,attack,3 descriptors", "comma-separated workloads")
	fs.StringVar(&o.rows, "rows", "", "run only the rows whose name matches this regular expression")
	fs.StringVar(&o.envoyEnv, "envoy-env", "REDIS_POOL_SIZE=10,REDIS_PIPELINE_WINDOW=0,REDIS_PIPELINE_LIMIT=0", "envoyproxy/ratelimit's Redis settings (the best of those tried here: BENCHMARKS.md), comma-separated NAME=VALUE")
	fs.StringVar(&o.floodgateEnv, "floodgate-env", "", "floodgate's extra settings, comma-separated NAME=VALUE (e.g. DECISION_TIMEOUT=1s)")
	fs.IntVar(&o.localCacheBytes, "local-cache-bytes", 1<<20, "LOCAL_CACHE_SIZE_IN_BYTES for both services (floodgate reads it as bytes/300 cached denials)")
	fs.BoolVar(&o.outage, "outage", false, "then run the outage comparison (Redis SIGSTOP 10s under load, SIGKILL, restart)")
	fs.BoolVar(&o.perf, "perf", false, "then profile floodgate's fixed-window service under the allowed load with perf(1)")
	fs.IntVar(&o.perfSeconds, "perf-seconds", 8, "seconds of the perf profile")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.floodgate == "" || o.envoy == "" || o.config == "" {
		return fmt.Errorf("-floodgate, -envoy and -config are required")
	}
	only, err := regexp.Compile(o.rows)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ps := ports{}
	redisPort, err := ps.free()
	if err != nil {
		return err
	}
	rd := &redisProc{bin: o.redisServer, port: redisPort, dir: dir}
	if err := rd.start(ctx); err != nil {
		return err
	}
	defer rd.kill()

	rows, err := startRows(ctx, o, dir, ps, rd, only)
	defer func() {
		for _, r := range rows {
			if r.ld != nil {
				r.ld.close()
			}
			r.p.kill()
		}
	}()
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "# rlsbench: %s, %s/%s, %d CPUs; %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), redisVersion(o.redisServer))
	fmt.Fprintf(out, "# %d callers over %d connections per service, %d descriptor values, each row %v per workload in %d alternating rounds after %v of warm-up; load generator, services and Redis on the same machine\n",
		o.callers, o.conns, o.values, o.duration, o.rounds, o.warmup)
	fgEnv := o.floodgateEnv
	if fgEnv == "" {
		fgEnv = "defaults (DECISION_TIMEOUT 50ms)"
	}
	fmt.Fprintf(out, "# envoyproxy/ratelimit: %s, LOCAL_CACHE_SIZE_IN_BYTES=%d; floodgate: the same LOCAL_CACHE_SIZE_IN_BYTES (%d cached denials), %s\n",
		o.envoyEnv, o.localCacheBytes, o.localCacheBytes/300, fgEnv)

	var wls []workload
	for _, w := range workloads(o.values) {
		for _, n := range strings.Split(o.workloads, ",") {
			if strings.TrimSpace(n) == w.name {
				wls = append(wls, w)
			}
		}
	}
	for _, w := range wls {
		fmt.Fprintf(os.Stderr, "== workload %s\n", w.name)
		for _, r := range rows {
			r.ld.run(ctx, w, o.callers, o.warmup, o.timeout)
		}
		per := o.duration / time.Duration(o.rounds)
		for round := range o.rounds {
			for k := range rows {
				r := rows[(k+round)%len(rows)]
				c0, _ := cpuTime(r.p.pid())
				t := r.ld.run(ctx, w, o.callers, per, o.timeout)
				c1, _ := cpuTime(r.p.pid())
				if r.t[w.name] == nil {
					r.t[w.name] = &tally{}
				}
				r.t[w.name].add(t)
				r.cpu[w.name] += c1 - c0
			}
		}
		for _, r := range rows {
			r.rss[w.name], _ = rss(r.p.pid())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printTable(out, rows, wls)
	printTargets(out, rows, wls, o.baseName)

	if o.perf {
		if err := profile(ctx, out, o, rows, wls); err != nil {
			return err
		}
	}
	if o.outage {
		return outage(ctx, out, o, rows, rd)
	}
	return nil
}

// startRows starts the services, each with its own ports.
func startRows(ctx context.Context, o options, dir string, ps ports, rd *redisProc, only *regexp.Regexp) ([]*row, error) {
	shared := filepath.Join(o.config, "ratelimit", "config")
	variant := func(alg string) (string, error) {
		d := filepath.Join(dir, alg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
		files, err := filepath.Glob(filepath.Join(shared, "*.yaml"))
		if err != nil {
			return "", err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", err
			}
			s := strings.Replace(string(b), "\ndomain:", "\nalgorithm: "+alg+"\ndomain:", 1)
			if !strings.Contains(s, "algorithm: "+alg) {
				s = "algorithm: " + alg + "\n" + s
			}
			if err := os.WriteFile(filepath.Join(d, filepath.Base(f)), []byte(s), 0o644); err != nil {
				return "", err
			}
		}
		return d, nil
	}
	cache := fmt.Sprintf("LOCAL_CACHE_SIZE_IN_BYTES=%d", o.localCacheBytes)
	type spec struct {
		name string
		run  func(grpcAddr string) (*proc, error)
	}
	fg := func(name, bin, configDir, prefix string, extra ...string) spec {
		return spec{name, func(grpcAddr string) (*proc, error) {
			hp, err := ps.free()
			if err != nil {
				return nil, err
			}
			return start(ctx, dir, name, grpcAddr, bin, nil, append([]string{
				"CONFIG_DIR=" + configDir, "REDIS_URL=" + rd.addr(), "CACHE_KEY_PREFIX=" + prefix,
				"GRPC_ADDR=" + grpcAddr, fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", hp), "LOG_LEVEL=warn", cache,
			}, append(envList(o.floodgateEnv), extra...)...))
		}}
	}
	sw, err := variant("sliding_window")
	if err != nil {
		return nil, err
	}
	tb, err := variant("token_bucket")
	if err != nil {
		return nil, err
	}
	specs := []spec{
		fg("floodgate fixed window", o.floodgate, shared, "fgfw:"),
		fg("floodgate sliding window", o.floodgate, sw, "fgsw:"),
		fg("floodgate token bucket", o.floodgate, tb, "fgtb:"),
	}
	if o.baseBin != "" {
		specs = append(specs,
			fg("floodgate fixed window ("+o.baseName+")", o.baseBin, shared, "fgbfw:", envList(o.baseEnv)...),
			fg("floodgate sliding window ("+o.baseName+")", o.baseBin, sw, "fgbsw:", envList(o.baseEnv)...))
	}
	specs = append(specs, []spec{
		{"envoyproxy/ratelimit", func(grpcAddr string) (*proc, error) {
			_, gp, _ := strings.Cut(grpcAddr, ":")
			hp, err1 := ps.free()
			dp, err2 := ps.free()
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("no free port")
			}
			env := []string{
				"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rd.addr(),
				"RUNTIME_ROOT=" + o.config, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
				"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + gp, "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", hp),
				"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", dp), "LOG_LEVEL=warn", cache,
			}
			env = append(env, envList(o.envoyEnv)...)
			return start(ctx, dir, "envoyproxy-ratelimit", grpcAddr, o.envoy, nil, env)
		}},
		{"null", func(grpcAddr string) (*proc, error) {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			return start(ctx, dir, "null", grpcAddr, self, []string{"null", "-addr", grpcAddr}, nil)
		}},
	}...)
	var rows []*row
	for _, s := range specs {
		if !only.MatchString(s.name) && s.name != "null" && s.name != "envoyproxy/ratelimit" {
			continue
		}
		gp, err := ps.free()
		if err != nil {
			return rows, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", gp)
		p, err := s.run(addr)
		if err != nil {
			return rows, err
		}
		r := &row{name: s.name, p: p, addr: addr, t: map[string]*tally{}, cpu: map[string]time.Duration{}, rss: map[string]int64{}}
		rows = append(rows, r)
		if r.ld, err = newLoader(addr, o.conns); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// envList splits "A=1,B=2" into environment entries.
func envList(s string) []string {
	var env []string
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			env = append(env, kv)
		}
	}
	return env
}

func redisVersion(bin string) string {
	b, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "redis-server ?"
	}
	return strings.TrimSpace(string(b))
}

func find(rows []*row, name string) *row {
	for _, r := range rows {
		if r.name == name {
			return r
		}
	}
	return nil
}

func (r *row) dps(w workload) float64 {
	t := r.t[w.name]
	if t == nil || t.elapsed == 0 {
		return 0
	}
	// A call that failed decided nothing.
	return float64((t.ok+t.over)*int64(w.decisions)) / t.elapsed.Seconds()
}

// cpuPer is the service's CPU time per decision, in µs.
func (r *row) cpuPer(w workload) float64 {
	t := r.t[w.name]
	if t == nil || t.ok+t.over == 0 {
		return 0
	}
	return float64(r.cpu[w.name].Microseconds()) / float64((t.ok+t.over)*int64(w.decisions))
}

func printTable(out io.Writer, rows []*row, wls []workload) {
	envoy, null := find(rows, "envoyproxy/ratelimit"), find(rows, "null")
	for _, w := range wls {
		fmt.Fprintf(out, "\n## %s (%d descriptor(s) per request)\n\n", w.name, w.decisions)
		tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.AlignRight|tabwriter.Debug)
		fmt.Fprintln(tw, "row\tdecisions/s\tvs envoy\tvs null\tp50\tp99\tp99 vs envoy\tCPU µs/decision\tCPU vs null\tRSS MB\tOK / OVER / errors\t")
		for _, r := range rows {
			t := r.t[w.name]
			if t == nil {
				continue
			}
			dps, cpu := r.dps(w), r.cpuPer(w)
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%.0f\t%d / %d / %d\t\n", r.name, dps,
				ratio(dps, envoy.dps(w)), ratio(dps, null.dps(w)),
				ms(t.quantile(0.5)), ms(t.quantile(0.99)), ratio(float64(t.quantile(0.99)), float64(envoy.t[w.name].quantile(0.99))),
				cpu, ratio(cpu, null.cpuPer(w)), float64(r.rss[w.name])/(1<<20), t.ok, t.over, t.errs)
		}
		tw.Flush()
		for _, r := range rows {
			if t := r.t[w.name]; t != nil && t.errs > 0 {
				fmt.Fprintf(out, "%s: %d calls failed, the first with: %s\n", r.name, t.errs, t.firstErr)
			}
		}
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// printTargets checks issue 28's targets in the workloads without
// denials, each a ratio in this run: for floodgate's two windows and,
// with -base, for the base binary's beside them.
func printTargets(out io.Writer, rows []*row, wls []workload, baseName string) {
	envoy, null := find(rows, "envoyproxy/ratelimit"), find(rows, "null")
	if envoy == nil || null == nil {
		return
	}
	fmt.Fprintf(out, "\n## Targets of issue 28 (ratios in this run)\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "target\tworkload\t%s\tnow\tmet now\t\n", baseName)
	for _, w := range wls {
		if w.name == "attack" || envoy.t[w.name] == nil || null.t[w.name] == nil {
			continue
		}
		for _, alg := range []struct {
			name string
			vs   float64 // the least ratio to envoyproxy/ratelimit's decisions/s
		}{{"fixed window", 2.0}, {"sliding window", 1.8}} {
			now, base := find(rows, "floodgate "+alg.name), find(rows, "floodgate "+alg.name+" ("+baseName+")")
			for _, c := range []struct {
				target  string
				of      func(r *row) float64
				want    float64
				atLeast bool
			}{
				{fmt.Sprintf("%s ≥ %.1f× envoyproxy/ratelimit", alg.name, alg.vs), func(r *row) float64 { return r.dps(w) / envoy.dps(w) }, alg.vs, true},
				{alg.name + " ≥ 0.6× null", func(r *row) float64 { return r.dps(w) / null.dps(w) }, 0.6, true},
				{alg.name + " p99 ≤ 0.5× envoyproxy/ratelimit's", func(r *row) float64 {
					return float64(r.t[w.name].quantile(0.99)) / float64(envoy.t[w.name].quantile(0.99))
				}, 0.5, false},
				{alg.name + " CPU per decision ≤ 1.5× null's", func(r *row) float64 { return r.cpuPer(w) / null.cpuPer(w) }, 1.5, false},
			} {
				if now == nil || now.t[w.name] == nil {
					continue
				}
				got := c.of(now)
				met := got >= c.want
				if !c.atLeast {
					met = got <= c.want
				}
				was := "-"
				if base != nil && base.t[w.name] != nil {
					was = fmt.Sprintf("%.2f×", c.of(base))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f×\t%s\t\n", c.target, w.name, was, got, map[bool]string{true: "met", false: "NOT met"}[met])
			}
		}
	}
	tw.Flush()
}
