package oracle

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Main is the escrow-oracle program: its subcommands "run", "check" and
// "replica", with args after the program's name. self is the program's
// own command line, with which run starts the replicas.
func Main(ctx context.Context, self []string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: run, check or replica")
	}
	switch args[0] {
	case "replica":
		return ReplicaMain(ctx, args[1:], stderr)
	case "check":
		return checkMain(args[1:], stdout, stderr)
	case "run":
		return runMain(ctx, self, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown subcommand %q: want run, check or replica", args[0])
}

func checkMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	slack := fs.Duration("slack", DefaultSlack, "how far each admission's span is widened on both sides")
	origin := fs.Duration("origin", 0, "where the fixed windows start, past each multiple of the window on the Unix epoch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := ReadFiles(fs.Args()...)
	if err != nil {
		return err
	}
	for _, r := range l.Rules {
		fmt.Fprintf(stdout, "%v: %v\n", r.Algorithm, CheckFrom(r, l.Spans[r.Name], *slack, *origin))
	}
	return nil
}

func runMain(ctx context.Context, self []string, args []string, stdout, stderr io.Writer) error {
	c := DefaultConfig()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Mode, "mode", Direct, "direct, escrow or broken")
	fs.StringVar(&c.Scenario, "scenario", Plain, "plain, kill or stop")
	fs.StringVar(&c.RedisURL, "redis", "", "the Redis URL (redis://127.0.0.1:port)")
	pid := fs.Int("redis-pid", 0, "the redis-server's process id, which the stop scenario freezes")
	fs.StringVar(&c.Dir, "dir", "", "where the replicas' logs go (default: a temporary directory, removed)")
	fs.Int64Var(&c.Limit, "limit", c.Limit, "every rule's limit")
	fs.DurationVar(&c.Window, "window", c.Window, "every rule's window")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the replicas drive their load")
	fs.DurationVar(&c.Period, "period", c.Period, "the lease period δ")
	fs.Int64Var(&c.LeaseUnits, "lease-units", c.LeaseUnits, "the units of a broken lease")
	fs.DurationVar(&c.Slack, "slack", c.Slack, "how far each admission's span is widened on both sides")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.RedisURL == "" {
		return errors.New("run: -redis is required")
	}
	if c.Scenario == Stop {
		if *pid <= 0 {
			return errors.New("run: the stop scenario needs -redis-pid")
		}
		c.Pause = func() error { return syscall.Kill(*pid, syscall.SIGSTOP) }
		c.Resume = func() error { return syscall.Kill(*pid, syscall.SIGCONT) }
	}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "escrow-oracle-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.Dir = dir
	}
	c.Command = func(args []string) *exec.Cmd {
		return exec.CommandContext(ctx, self[0], append(append(self[1:len(self):len(self)], "replica"), args...)...)
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	start := time.Now()
	out, err := Run(ctx, c)
	if err != nil {
		return err
	}
	var t Tally
	for _, r := range out.Tallies {
		t.Allowed, t.Denied, t.Errors, t.Takes, t.Leases = t.Allowed+r.Allowed, t.Denied+r.Denied, t.Errors+r.Errors, t.Takes+r.Takes, t.Leases+r.Leases
	}
	c.Logger.Info("run done", "mode", c.Mode, "scenario", c.Scenario, "took", time.Since(start).Round(time.Millisecond),
		"replicas_tallied", len(out.Tallies), "allowed", t.Allowed, "denied", t.Denied, "errors", t.Errors, "store_hits", t.Takes, "leases", t.Leases)
	for _, r := range out.Reports {
		fmt.Fprintf(stdout, "%s %s %v: %v\n", c.Scenario, c.Mode, r.Rule.Algorithm, r)
	}
	return nil
}
