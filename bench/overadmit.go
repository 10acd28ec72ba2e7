package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// guberAsk asks a gubernator daemon for one hit of key: whether it was
// allowed, and the bucket's reset time (Unix milliseconds).
type guberAsk func(ctx context.Context, key string) (allowed bool, reset int64, err error)

// The over-admission run: one key hammered past its limit by 64
// goroutines over the three replicas of a row, every admission logged
// with its time span in the escrow oracle's log format
// (internal/oracle, log.go), for the oracle's checker
// (escrow-oracle check) to count the admissions past the limit.
const (
	overLimit  = 1000
	overWindow = time.Second
)

// The rules of the run, as the oracle's logs declare them. Two pairs of
// rows, each hammered and checked on its own:
//   - fixed windows: floodgate escrow runs floodgate.FixedWindow, whose
//     windows are the epoch's (the store indexes them by
//     floor(now/Window)): origin 0. gubernator's TOKEN_BUCKET is, by its
//     README, a bucket that fills with hits and answers OVER_LIMIT once
//     full "until the reset_time is reached at which point the bucket is
//     emptied", its reset time being its first hit's time plus the
//     duration (algorithms.go, tokenBucketNewItem: ExpireAt = CreatedAt +
//     Duration, in whole milliseconds) and the item expired once
//     ExpireAt < now (cache.go, IsExpired): a fixed window of Duration +
//     1 ms that starts at the first hit, the next one at the first hit
//     after it, so that under a hammer that hits the key every few
//     microseconds the windows follow each other every Duration + 1 ms
//     from the first hit. Where they start is measured, not assumed:
//     every answer's reset time tells the start of the window it came
//     from. Each replica starts its own copy's windows at its own first
//     hit, a few milliseconds apart, and the owner broadcasts its own, so
//     the answers come from a few starts: all go to ROW.origins, most
//     answers first, and the script checks the logs from each
//     (escrow-oracle check -origin) and takes the least count: past the
//     limit in whichever of gubernator's windows.
//   - buckets: floodgate escrow runs floodgate.TokenBucket (GCRA) of
//     overLimit per overWindow with a burst of overLimit; gubernator's
//     LEAKY_BUCKET of the same limit and duration, whose burst defaults
//     to the limit, is the same bucket (algorithms.go, leakyBucket: the
//     bucket holds at most Burst, gains one unit every Duration/Limit
//     since its last update, and admits a hit while it holds one). The
//     oracle checks both against the envelope of that bucket (at most
//     Burst + d/T admissions in any interval of length d, T the emission
//     interval), which no clock origin changes: ROW.origins holds 0ms.
var (
	overFixed  = floodgate.Rule{Name: "overadmit-f", Limit: overLimit, Window: overWindow, Algorithm: floodgate.FixedWindow}
	overBucket = floodgate.Rule{Name: "overadmit-t", Limit: overLimit, Window: overWindow, Algorithm: floodgate.TokenBucket, Burst: overLimit}
)

// overLetters are the oracle's log letters of the run's algorithms.
var overLetters = map[floodgate.Algorithm]byte{floodgate.FixedWindow: 'f', floodgate.TokenBucket: 't'}

// overRow is one row of the run: its name, in the logs' file names and
// headers, the rule its logs declare for the checker, and a decider per
// replica that also returns the reset time gubernator answered (0 for
// floodgate). With origins, the reset times name the starts of
// gubernator's fixed windows, which the checker is run from.
type overRow struct {
	name    string
	rule    floodgate.Rule
	origins bool
	ask     []guberAsk
}

// overAdmissions runs each row for d and writes its replicas' logs to
// dir, named ROW-N.log; it prints one line per row. The checker's verdict
// comes from escrow-oracle check on those files (scripts/guber-compare.sh).
func overAdmissions(out io.Writer, addr, dir string, d time.Duration, withGuber bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(out, "# over-admissions: one key, %d per %v, hammered by %d goroutines over %d replicas for %v from an epoch window's edge; logs in %s\n",
		overLimit, overWindow, escrowGoroutines, escrowReplicas, d, dir)
	ls, closeLs, err := buildLimiters(escrowRows[1], addr, newPrefix())
	if err != nil {
		return err
	}
	defer closeLs()
	escrowRow := func(name string, rule floodgate.Rule) overRow {
		row := overRow{name: name, rule: rule}
		for _, l := range ls {
			row.ask = append(row.ask, func(ctx context.Context, key string) (bool, int64, error) {
				dec, err := l.Allow(ctx, rule, key)
				return dec.Allowed, 0, err
			})
		}
		return row
	}
	rows := []overRow{escrowRow("floodgate-escrow", overFixed), escrowRow("floodgate-escrow-bucket", overBucket)}
	if withGuber {
		// One cluster a row: the other row's broadcasts do not share its
		// daemons' time.
		for _, leaky := range []bool{false, true} {
			asks, closeG, err := guberReplicas(escrowReplicas, overLimit, overWindow, leaky)
			if err != nil {
				return err
			}
			defer closeG()
			row := overRow{name: "gubernator-global", rule: overFixed, origins: true, ask: asks}
			row.rule.Window += time.Millisecond
			if leaky {
				row = overRow{name: "gubernator-global-leaky", rule: overBucket, ask: asks}
			}
			rows = append(rows, row)
		}
	}
	for _, row := range rows {
		if err := overRun(out, row, newPrefix()+"hot", dir, d); err != nil {
			return fmt.Errorf("%s: %w", row.name, err)
		}
	}
	return nil
}

// overRun hammers key through row's replicas for d and writes their logs.
func overRun(out io.Writer, row overRow, key, dir string, d time.Duration) error {
	type replicaLog struct {
		spans                 [][2]int64
		allowed, denied, errs int64
		// starts counts gubernator's answers by where the window they
		// came from started, in milliseconds past the epoch's windows;
		// admits, its admissions by the reset time the answer named.
		starts, admits map[int64]int64
	}
	logs := make([]replicaLog, len(row.ask))
	var mu sync.Mutex
	var firstErr error
	window := row.rule.Window
	w, dur := window.Milliseconds(), overWindow.Milliseconds()
	// The load starts on an edge of the epoch's windows: a sleep to just
	// before it, a spin to just after it (a sleep alone wakes up
	// milliseconds late on a busy machine), then every goroutine at once.
	edge := (time.Now().UnixNano()/window.Nanoseconds() + 1) * window.Nanoseconds()
	start := time.Unix(0, edge).Add(100 * time.Microsecond)
	end := start.Add(d)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for g := range escrowGoroutines {
		r := g % len(row.ask)
		ask := row.ask[r]
		wg.Go(func() {
			mine := replicaLog{starts: map[int64]int64{}, admits: map[int64]int64{}}
			<-release
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				sent := time.Now()
				ok, reset, err := ask(ctx, key)
				answered := time.Now()
				cancel()
				switch {
				case err != nil:
					mine.errs++
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				case ok:
					mine.allowed++
					mine.spans = append(mine.spans, [2]int64{sent.UnixNano(), answered.Sub(sent).Nanoseconds()})
				default:
					mine.denied++
				}
				if row.origins && reset != 0 {
					mine.starts[((reset-dur)%w+w)%w]++
					if ok {
						mine.admits[reset]++
					}
				}
			}
			mu.Lock()
			l := &logs[r]
			l.spans = append(l.spans, mine.spans...)
			l.allowed, l.denied, l.errs = l.allowed+mine.allowed, l.denied+mine.denied, l.errs+mine.errs
			if l.starts == nil {
				l.starts, l.admits = map[int64]int64{}, map[int64]int64{}
			}
			for k, v := range mine.starts {
				l.starts[k] += v
			}
			for k, v := range mine.admits {
				l.admits[k] += v
			}
			mu.Unlock()
		})
	}
	time.Sleep(time.Until(start) - 5*time.Millisecond)
	for time.Now().Before(start) {
	}
	close(release)
	wg.Wait()
	letter, rule := overLetters[row.rule.Algorithm], row.rule
	all := replicaLog{starts: map[int64]int64{}, admits: map[int64]int64{}}
	for _, l := range logs {
		all.allowed, all.denied, all.errs = all.allowed+l.allowed, all.denied+l.denied, all.errs+l.errs
		for k, v := range l.starts {
			all.starts[k] += v
		}
		for k, v := range l.admits {
			all.admits[k] += v
		}
	}
	// Every start that answers came from, most answers first: the
	// owner's windows, which it broadcasts, and those of a replica's own
	// copy of the key.
	origins := slices.SortedFunc(maps.Keys(all.starts), func(a, b int64) int {
		return cmp.Or(cmp.Compare(all.starts[b], all.starts[a]), cmp.Compare(a, b))
	})
	if len(origins) == 0 {
		origins = []int64{0}
	}
	for i, l := range logs {
		var b strings.Builder
		fmt.Fprintf(&b, "# oracle replica=%d mode=%s\n# rule %c %s %d %d %d\n", i, row.name, letter, rule.Name, rule.Limit, rule.Window.Nanoseconds(), rule.Burst)
		for _, s := range l.spans {
			fmt.Fprintf(&b, "%c %d %d\n", letter, s[0], s[1])
		}
		fmt.Fprintf(&b, "# tally allowed=%d denied=%d errors=%d takes=0 leases=0\n", l.allowed, l.denied, l.errs)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", row.name, i)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	// One origin a line, for escrow-oracle check -origin.
	var o []byte
	for _, k := range origins {
		o = fmt.Appendf(o, "%dms\n", k)
	}
	if err := os.WriteFile(filepath.Join(dir, row.name+".origins"), o, 0o644); err != nil {
		return err
	}
	exact := fmt.Sprintf("%d windows' limits: %d", d/overWindow, int64(d/overWindow)*rule.Limit)
	if rule.Algorithm == floodgate.TokenBucket {
		exact = fmt.Sprintf("a full bucket and %v of its rate: %d", d, rule.Burst+int64(d/overWindow)*rule.Limit)
	}
	fmt.Fprintf(out, "%s: %s decisions/s, %d allowed (%s), %d denied, %d errors",
		row.name, count(float64(all.allowed+all.denied)/d.Seconds()), all.allowed, exact, all.denied, all.errs)
	// A bound that no placement of the windows escapes: the admissions
	// lie in an interval of length L, which back-to-back windows of the
	// rule's length meet at most ceil(L/window)+1 of; a bucket admits at
	// most its burst and one every emission interval over it.
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, l := range logs {
		for _, sp := range l.spans {
			lo, hi = min(lo, sp[0]), max(hi, sp[0]+sp[1])
		}
	}
	if all.allowed > 0 {
		wn := window.Nanoseconds()
		most := ((hi-lo+wn-1)/wn + 1) * rule.Limit
		where := fmt.Sprintf("in any back-to-back windows of %v", window)
		if rule.Algorithm == floodgate.TokenBucket {
			most = rule.Burst + (hi-lo)*rule.Limit/wn
			where = fmt.Sprintf("in %v, from a full bucket of %d", time.Duration(hi-lo).Round(time.Millisecond), rule.Burst)
		}
		fmt.Fprintf(out, "; %s: at most %d of its admissions fit, so at least %d past the limit", where, most, max(0, all.allowed-most))
	}
	// By gubernator's own account, with no clock: each answer names the
	// window it came from (its reset time), and no window may admit more
	// than the limit across the cluster. A replica's own copy of a window
	// that the owner's broadcast has not replaced yet counts as a window
	// of its own, with a limit of its own, so this count can only be low.
	if len(all.admits) > 0 {
		var over int64
		for _, n := range all.admits {
			over += max(0, n-overLimit)
		}
		fmt.Fprintf(out, "; by the windows its answers named (%d windows): %d of its %d admissions past the limit", len(all.admits), over, all.allowed)
	}
	if len(all.starts) > 0 {
		fmt.Fprintf(out, "; its windows, %v long, start past the epoch's at", window)
		for _, k := range origins {
			fmt.Fprintf(out, " %dms (%d answers)", k, all.starts[k])
		}
	}
	fmt.Fprintln(out)
	if firstErr != nil {
		fmt.Fprintf(out, "%s: first error: %v\n", row.name, firstErr)
	}
	return nil
}
