package oracle

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// envReplica makes the test binary a replica process: Run starts this
// binary again, with the replica's arguments, as its replicas.
const envReplica = "FLOODGATE_ORACLE_REPLICA"

func TestMain(m *testing.M) {
	if os.Getenv(envReplica) == "1" {
		if err := ReplicaMain(context.Background(), os.Args[1:], os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	redistest.Main(m)
}

// shortConfig is the test's run: three replica processes for 3 s, with
// limits of 50 per 500 ms and a lease period of 100 ms, so that every
// window, burst and lease repeats several times.
func shortConfig(t *testing.T, mode, scenario, url string) Config {
	return Config{
		Mode: mode, Scenario: scenario, RedisURL: url, Dir: t.TempDir(),
		Command: func(args []string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), envReplica+"=1")
			return cmd
		},
		Limit: 50, Window: 500 * time.Millisecond, Duration: 3 * time.Second, Period: 100 * time.Millisecond,
		LeaseUnits: 5, Rate: 40, BurstRate: 300, BurstShare: 0.5, Goroutines: 2, Slack: DefaultSlack,
	}
}

func run(t *testing.T, c Config) Outcome {
	t.Helper()
	var output syncbuf.Buffer
	c.Output = &output
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replicas' output:\n%s", output.String())
		}
	})
	out, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Reports) != 4 {
		t.Fatalf("%d reports, want one per algorithm (4)", len(out.Reports))
	}
	total := 0
	for _, r := range out.Reports {
		total += r.Total
		t.Logf("%s %s %v: %v", c.Scenario, c.Mode, r.Rule.Algorithm, r)
		// The bursts drive every key far past its limit, in every burst:
		// a run with less than a window's limit drove nothing.
		if int64(r.Total) < c.Limit {
			t.Errorf("%v: %d admissions in all, want at least the limit %d: the load never reached the limit", r.Rule.Algorithm, r.Total, c.Limit)
		}
	}
	// Every replica that was not killed tallied what it decided, and its
	// log holds every admission it counted.
	want := Replicas
	if c.Scenario == Kill {
		want--
	}
	if len(out.Tallies) != want {
		t.Fatalf("%d tallies, want %d: a replica did not finish", len(out.Tallies), want)
	}
	var allowed int64
	for i, tl := range out.Tallies {
		t.Logf("replica tally %d: %+v", i, tl)
		allowed += tl.Allowed
		if c.Mode == Direct && (tl.Takes != tl.Allowed+tl.Denied+tl.Errors || tl.Leases != 0) {
			t.Errorf("direct replica: %+v, want one store hit per decision and no lease", tl)
		}
	}
	if c.Scenario != Kill && allowed != int64(total) {
		t.Errorf("the replicas allowed %d, their logs hold %d admissions", allowed, total)
	}
	return out
}

// leased reports the leases the run's replicas were granted.
func leased(out Outcome) int64 {
	var n int64
	for _, tl := range out.Tallies {
		n += tl.Leases
	}
	return n
}

// fleetHolds runs c and requires 0 over-admissions for every algorithm.
// An escrow run must have decided from leases: otherwise it proved
// nothing about them.
func fleetHolds(t *testing.T, c Config) {
	out := run(t, c)
	for _, r := range out.Reports {
		if r.Over != 0 {
			t.Errorf("%v: %v: the fleet admitted past the limit", r.Rule.Algorithm, r)
		}
	}
	if c.Mode == Escrow && leased(out) == 0 {
		t.Errorf("escrow granted no lease of more than one unit: the run tested the direct path only")
	}
}

// TestOracleHolds: neither today's path nor escrow admits past a limit
// across three replica processes, nor when a replica is killed holding
// leases (escrow), nor while Redis is frozen for longer than a lease.
func TestOracleHolds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mode, scenario string }{
		{Direct, Plain}, {Direct, Stop}, {Escrow, Plain}, {Escrow, Kill}, {Escrow, Stop},
	} {
		t.Run(c.mode+"/"+c.scenario, func(t *testing.T) {
			t.Parallel()
			if c.scenario != Stop {
				fleetHolds(t, shortConfig(t, c.mode, c.scenario, "redis://"+redistest.Addr(t)))
				return
			}
			srv := redistest.Start(t) // a server of its own to freeze
			cfg := shortConfig(t, c.mode, Stop, srv.URL())
			cfg.Pause, cfg.Resume = srv.Stop, srv.Cont
			fleetHolds(t, cfg)
		})
	}
}

// TestOracleCatchesBrokenEscrow is the oracle's own test: an escrow that
// stamps a lease at its grant (the Broken mode) admits past the sliding
// log's limit, and the oracle must say so. The steady replica hands out
// units of each lease up to a lease period after the store stamped them;
// once the stamps leave the window, the bursting replicas take their
// places while those units still lie in it.
func TestOracleCatchesBrokenEscrow(t *testing.T) {
	t.Parallel()
	out := run(t, shortConfig(t, Broken, Plain, "redis://"+redistest.Addr(t)))
	if leased(out) == 0 {
		t.Errorf("the broken escrow granted no lease")
	}
	if r := out.Reports[0]; r.Over == 0 {
		t.Errorf("%v: %v, want over-admissions: the broken escrow went unseen", r.Rule.Algorithm, r)
	}
}
