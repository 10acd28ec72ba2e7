package enforce_test

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A gate logs its degraded decisions in aggregate, through the whole
// Enforcer: the first of an outage at once; those of the next interval as
// one line, written when the interval ends, that counts the others it
// stands for; and what is held when the Enforcer closes.
func TestDegradedDecisionsLoggedAtTheInterval(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	fault := faultstore.New(ms)
	lim, err := floodgate.New(fault, floodgate.Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	logs := new(syncbuf.Buffer)
	e, err := enforce.New(enforce.Options{Limiter: lim, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Gate(enforce.Spec{Name: "agg", Limits: []enforce.Limit{{Rule: rule("agg", 10)}}, Failure: enforce.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	const interval = 200 * time.Millisecond
	enforce.SetLogInterval(g, interval)
	fault.Set(faultstore.Fail)
	ctx := context.Background()
	check := func(n int) {
		t.Helper()
		for range n {
			res, err := g.Check(ctx, g.Hits(ctx, []string{"k"}))
			if err != nil || res.Outcome != enforce.FailedOpen {
				t.Fatalf("a check with the store down: %v, %v; want FailedOpen", res.Outcome, err)
			}
		}
	}
	suppressed := regexp.MustCompile(`gate=agg .*suppressed=(\d+)`)
	lines := func() []int { // each line's suppressed count
		var out []int
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if m := suppressed.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				out = append(out, n)
			} else if l != "" {
				t.Fatalf("unexpected log line %q", l)
			}
		}
		return out
	}
	start := time.Now()
	check(1)
	if got := lines(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("after the first degraded decision: suppressed counts %v; want one line at once, standing for itself", got)
	}
	check(9)
	within := time.Since(start) < interval // a machine that stalled past it may have written sooner
	if got := lines(); within && len(got) != 1 {
		t.Fatalf("9 more within the interval: %v; want them held", got)
	}
	for deadline := time.Now().Add(5 * time.Second); len(lines()) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held decisions were never logged")
		}
	}
	if got := lines(); within && (len(got) != 2 || got[1] != 8) {
		t.Fatalf("suppressed counts %v; want a second line, when the interval ended, for the 9 held: the latest and 8 more", got)
	}
	check(3) // within the interval after the second line: held until Close writes them
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range lines() {
		total += 1 + n
	}
	if total != 13 {
		t.Fatalf("the lines %v stand for %d degraded decisions; want all 13", lines(), total)
	}
}

// A summary line stands for the gate's degraded decisions of every
// failure mode, and names the latest one's mode and outcome, as the
// package doc says: here an open and then an error decision held after a
// closed one written at once.
func TestDegradedSummaryNamesTheLatest(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "mixed"})
	v.fault.Set(faultstore.Fail)
	for _, c := range []struct {
		mode enforce.FailureMode
		want enforce.Outcome
	}{{enforce.FailClosed, enforce.FailedClosed}, {enforce.FailOpen, enforce.FailedOpen}, {enforce.FailError, enforce.Errored}} {
		res, err := g.Check(t.Context(), []enforce.Hit{hit(rule("mx", 5), "k", c.mode)})
		if err != nil || res.Outcome != c.want {
			t.Fatalf("%v: %v, %v; want %v", c.mode, res.Outcome, err, c.want)
		}
	}
	if err := v.e.Close(); err != nil { // writes the held line
		t.Fatal(err)
	}
	want := []string{
		"gate=mixed failure_mode=closed outcome=failed_closed",
		"gate=mixed failure_mode=error outcome=error",
	}
	lines := strings.Split(strings.TrimSpace(v.logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], want[0]) || !strings.HasSuffix(lines[0], "suppressed=0") ||
		!strings.Contains(lines[1], want[1]) || !strings.HasSuffix(lines[1], "suppressed=1") {
		t.Fatalf("log lines:\n%s\nwant two: %q (suppressed=0), then %q (suppressed=1: the open one)", v.logs, want[0], want[1])
	}
}
