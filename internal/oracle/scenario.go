package oracle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The scenarios of a run.
const (
	// Plain runs the three replicas to the end.
	Plain = "plain"
	// Kill kills a burst replica with SIGKILL in the middle of a burst,
	// while it holds leases.
	Kill = "kill"
	// Stop freezes the Redis server with SIGSTOP, in the middle of a
	// burst, for three lease periods, then resumes it with SIGCONT.
	Stop = "stop"
)

// Replicas is how many replica processes a run starts: replica 0 steady,
// the others bursting.
const Replicas = 3

// Config is a run: Replicas replica processes on one Redis, in one mode
// and scenario. Zero fields take the defaults of DefaultConfig.
type Config struct {
	Mode     string // Direct, Escrow or Broken
	Scenario string // Plain, Kill or Stop
	RedisURL string
	Dir      string // where the logs go
	// Command returns the command that runs a replica with args (what
	// ReplicaMain parses), such as this program's "replica" subcommand.
	Command func(args []string) *exec.Cmd
	// Pause and Resume freeze and resume the Redis server (Stop).
	Pause, Resume func() error
	// Output receives the replicas' stdout and stderr; nil means
	// os.Stderr.
	Output io.Writer

	Limit      int64
	Window     time.Duration
	Duration   time.Duration
	Period     time.Duration
	LeaseUnits int64
	Rate       float64
	BurstRate  float64
	BurstShare float64
	Goroutines int
	Slack      time.Duration
	Logger     *slog.Logger
}

// DefaultConfig is the script's run: limits of 100 per second, a lease
// period of 100 ms, 8 s of load, a steady replica at half of each limit
// and two bursting ones at five times it for half of every other second.
func DefaultConfig() Config {
	return Config{
		Limit: 100, Window: time.Second, Duration: 8 * time.Second, Period: 100 * time.Millisecond,
		LeaseUnits: 10, Rate: 50, BurstRate: 500, BurstShare: 0.5, Goroutines: 4, Slack: DefaultSlack,
	}
}

// replicaConfig is replica i's configuration in the run c.
func (c Config) replicaConfig(i int, key string) ReplicaConfig {
	role := Steady
	if i > 0 {
		role = Burst
	}
	return ReplicaConfig{
		Index: i, Mode: c.Mode, Role: role, RedisURL: c.RedisURL, Key: key,
		Log:   filepath.Join(c.Dir, fmt.Sprintf("replica-%d.log", i)),
		Limit: c.Limit, Window: c.Window, Duration: c.Duration, Period: c.Period, LeaseUnits: c.LeaseUnits,
		Rate: c.Rate, BurstRate: c.BurstRate, BurstShare: c.BurstShare, Goroutines: c.Goroutines,
	}
}

// Outcome is what a run found: one Report per rule, in the order of
// Rules, and the tallies of the replicas that were not killed.
type Outcome struct {
	Reports []Report
	Tallies []Tally
}

// Run runs c and checks the union of the replicas' logs.
func Run(ctx context.Context, c Config) (Outcome, error) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Output == nil {
		c.Output = os.Stderr
	}
	if c.Scenario == Stop && (c.Pause == nil || c.Resume == nil) {
		return Outcome{}, errors.New("oracle: the stop scenario needs Pause and Resume")
	}
	var id [6]byte
	rand.Read(id[:])
	key := c.Scenario + "-" + c.Mode + "-" + hex.EncodeToString(id[:])
	procs := make([]*exec.Cmd, Replicas)
	logs := make([]string, Replicas)
	for i := range procs {
		rc := c.replicaConfig(i, key)
		logs[i] = rc.Log
		cmd := c.Command(rc.Args())
		cmd.Stdout, cmd.Stderr = c.Output, c.Output
		if err := cmd.Start(); err != nil {
			for _, p := range procs[:i] {
				p.Process.Kill()
				p.Wait()
			}
			return Outcome{}, fmt.Errorf("oracle: replica %d: %w", i, err)
		}
		procs[i] = cmd
	}
	killed := -1
	var faultErr error
	var wg sync.WaitGroup
	if c.Scenario != Plain {
		wg.Go(func() {
			// The middle of the first burst past the run's middle.
			mid := burstTime(time.Now().Add(c.Duration/2), c.Window, c.BurstShare)
			at := mid.Add(time.Duration(c.BurstShare * float64(c.Window) / 2))
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				return
			}
			switch c.Scenario {
			case Kill:
				killed = 1
				c.Logger.Info("SIGKILL", "replica", 1)
				faultErr = procs[1].Process.Kill()
			case Stop:
				c.Logger.Info("SIGSTOP redis", "for", 3*c.Period)
				if faultErr = c.Pause(); faultErr != nil {
					return
				}
				time.Sleep(3 * c.Period)
				faultErr = c.Resume()
			}
		})
	}
	// A replica that outlives its load by far more than Hang (it should
	// have given up by itself) is killed, and the run fails.
	exited := make([]atomic.Bool, len(procs))
	hung := time.AfterFunc(c.Duration+2*Hang, func() {
		for i, p := range procs {
			if !exited[i].Load() {
				c.Logger.Error("replica hung; killing it", "replica", i)
				p.Process.Kill()
			}
		}
	})
	defer hung.Stop()
	var errs []error
	for i, p := range procs {
		err := p.Wait()
		exited[i].Store(true)
		if err != nil {
			wg.Wait()
			if i != killed {
				errs = append(errs, fmt.Errorf("oracle: replica %d: %w", i, err))
			}
		}
	}
	wg.Wait()
	if err := errors.Join(append(errs, faultErr)...); err != nil {
		return Outcome{}, err
	}
	l, err := ReadFiles(logs...)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Tallies: l.Tallies}
	for _, r := range Rules(c.Limit, c.Window) {
		out.Reports = append(out.Reports, Check(r, l.Spans[r.Name], c.Slack))
	}
	return out, nil
}

// Args returns the arguments that make ReplicaMain run c.
func (c ReplicaConfig) Args() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []string{
		"-index", strconv.Itoa(c.Index), "-mode", c.Mode, "-role", c.Role, "-redis", c.RedisURL,
		"-key", c.Key, "-log", c.Log, "-limit", strconv.FormatInt(c.Limit, 10), "-window", c.Window.String(),
		"-duration", c.Duration.String(), "-period", c.Period.String(), "-lease-units", strconv.FormatInt(c.LeaseUnits, 10),
		"-rate", f(c.Rate), "-burst-rate", f(c.BurstRate), "-burst-share", f(c.BurstShare),
		"-goroutines", strconv.Itoa(c.Goroutines),
	}
}

// ReplicaMain is a replica process: it parses args (as Args writes
// them), runs the replica, and logs its figures to stderr.
func ReplicaMain(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("replica", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c ReplicaConfig
	fs.IntVar(&c.Index, "index", 0, "the replica's number")
	fs.StringVar(&c.Mode, "mode", Direct, "direct, escrow or broken")
	fs.StringVar(&c.Role, "role", Steady, "steady or burst")
	fs.StringVar(&c.RedisURL, "redis", "", "the Redis URL")
	fs.StringVar(&c.Key, "key", "", "the key of every rule")
	fs.StringVar(&c.Log, "log", "", "the log's path")
	fs.Int64Var(&c.Limit, "limit", 100, "every rule's limit")
	fs.DurationVar(&c.Window, "window", time.Second, "every rule's window")
	fs.DurationVar(&c.Duration, "duration", 8*time.Second, "how long to drive the load")
	fs.DurationVar(&c.Period, "period", 100*time.Millisecond, "the lease period of escrow and broken")
	fs.Int64Var(&c.LeaseUnits, "lease-units", 10, "the units of a broken lease")
	fs.Float64Var(&c.Rate, "rate", 50, "requests per second and key (steady)")
	fs.Float64Var(&c.BurstRate, "burst-rate", 500, "requests per second and key (burst)")
	fs.Float64Var(&c.BurstShare, "burst-share", 0.5, "the share of odd windows a burst lasts")
	fs.IntVar(&c.Goroutines, "goroutines", 4, "goroutines per key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	bad := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New(msg))
		}
	}
	bad(c.RedisURL != "" && c.Key != "" && c.Log != "", "-redis, -key and -log are required")
	bad(c.Mode == Direct || c.Mode == Escrow || c.Mode == Broken, fmt.Sprintf("-mode %q: want direct, escrow or broken", c.Mode))
	bad(c.Role == Steady || c.Role == Burst, fmt.Sprintf("-role %q: want steady or burst", c.Role))
	bad(c.Rate > 0 && c.BurstRate > 0 && c.Goroutines > 0 && c.LeaseUnits > 0, "-rate, -burst-rate, -goroutines and -lease-units must be positive")
	bad(c.BurstShare > 0 && c.BurstShare <= 1, "-burst-share must be in (0, 1]")
	bad(c.Limit > 0 && c.Window > 0 && c.Duration > 0 && c.Period > 0, "-limit, -window, -duration and -period must be positive")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("oracle: replica: %w", err)
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, nil)).With("replica", c.Index, "mode", c.Mode, "role", c.Role)
	c.Stderr = stderr
	t, err := RunReplica(ctx, c)
	if err != nil {
		return err
	}
	c.Logger.Info("done", "allowed", t.Allowed, "denied", t.Denied, "errors", t.Errors, "store_hits", t.Takes, "leases", t.Leases)
	return nil
}
