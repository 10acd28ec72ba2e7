package oracle

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// A log is one replica's admissions, one line each, in a file of its own:
//
//	# oracle replica=1 mode=direct
//	# rule s oracle-s 50 500000000 0
//	s 1796270400123456000 84000
//
// A "# rule" line names a key's letter (s sliding window, f fixed window,
// c sliding-window counter, t token bucket), then the rule's name, limit,
// window in nanoseconds and burst. An admission line holds the letter, the
// wall-clock time (Unix nanoseconds, CLOCK_REALTIME) just before the
// replica asked, and how many nanoseconds later the answer came: the
// decision (the Redis server's TIME for a direct take, the replica's clock
// for a unit of a lease) lies in between. Only admissions are logged.

// Span is one admission: it was decided at a time in [Lo, Hi], Unix
// nanoseconds on the machine's wall clock, which the replicas and the
// Redis server share.
type Span struct{ Lo, Hi int64 }

// letters maps each algorithm the oracle drives to its log letter.
var letters = map[floodgate.Algorithm]byte{
	floodgate.SlidingWindow:        's',
	floodgate.FixedWindow:          'f',
	floodgate.SlidingWindowCounter: 'c',
	floodgate.TokenBucket:          't',
}

// Writer appends a replica's log to a file with one write(2) per line and
// no buffer in the process, so that a replica killed with SIGKILL loses at
// most the admission it was deciding when it died (the kernel has every
// line written before). It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte // guarded by mu
	err error  // the first write error; guarded by mu
}

// Create creates the log file path with its header: the replica's number
// and mode, then one "# rule" line per rule.
func Create(path string, replica int, mode string, rules []floodgate.Rule) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("oracle: log: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# oracle replica=%d mode=%s\n", replica, mode)
	for _, r := range rules {
		c, ok := letters[r.Algorithm]
		if !ok {
			f.Close()
			return nil, fmt.Errorf("oracle: log: no letter for %v", r.Algorithm)
		}
		fmt.Fprintf(&b, "# rule %c %s %d %d %d\n", c, r.Name, r.Limit, int64(r.Window), r.Burst)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return nil, fmt.Errorf("oracle: log: %w", err)
	}
	return &Writer{f: f}, nil
}

// Admit logs an admission of alg's key decided between sent and answered.
func (w *Writer) Admit(alg floodgate.Algorithm, sent, answered time.Time) {
	lo := sent.UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	b := append(w.buf[:0], letters[alg], ' ')
	b = strconv.AppendInt(b, lo, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, answered.UnixNano()-lo, 10)
	b = append(b, '\n')
	w.buf = b
	if _, err := w.f.Write(b); err != nil && w.err == nil {
		w.err = err
	}
}

// Tally ends the log with the replica's tally: a line
// "# tally allowed=N denied=N errors=N takes=N leases=N". A killed replica's log
// has none.
func (w *Writer) Tally(t Tally) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := fmt.Fprintf(w.f, "# tally allowed=%d denied=%d errors=%d takes=%d leases=%d\n", t.Allowed, t.Denied, t.Errors, t.Takes, t.Leases); err != nil && w.err == nil {
		w.err = err
	}
}

// Close closes the file and reports the first error of any write.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := errors.Join(w.err, w.f.Close())
	if err != nil {
		return fmt.Errorf("oracle: log: %w", err)
	}
	return nil
}

// Logs is the union of several replicas' logs: each rule, and every
// admission of its key.
type Logs struct {
	Rules []floodgate.Rule  // in the order of the first log's header
	Spans map[string][]Span // by rule name
	// Tallies holds the tally of each log that ends with one (a killed
	// replica's does not), in the order read.
	Tallies []Tally
	alg     map[byte]floodgate.Rule // by letter
}

// Read adds the log data (named name, for errors) to l. Every log must
// declare the same rules. A last line without its newline (a replica
// killed while writing it, which one write(2) per line makes all but
// impossible) is ignored, since its figures may be cut short.
func (l *Logs) Read(name string, data []byte) error {
	if l.Spans == nil {
		l.Spans = map[string][]Span{}
	}
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		data = data[:i+1]
	}
	seen := map[byte]floodgate.Rule{}
	for n, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		bad := func(err error) error { return fmt.Errorf("oracle: %s:%d: %q: %w", name, n+1, line, err) }
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "#" && len(f) > 1 && f[1] == "tally":
			var t Tally
			if _, err := fmt.Sscanf(line, "# tally allowed=%d denied=%d errors=%d takes=%d leases=%d", &t.Allowed, &t.Denied, &t.Errors, &t.Takes, &t.Leases); err != nil {
				return bad(err)
			}
			l.Tallies = append(l.Tallies, t)
		case f[0] == "#":
			if len(f) < 2 || f[1] != "rule" {
				continue
			}
			c, rule, err := parseRule(f)
			if err != nil {
				return bad(err)
			}
			if old, ok := l.alg[c]; ok && old != rule {
				return bad(fmt.Errorf("rule %v differs from another log's %v", rule, old))
			}
			if l.alg == nil {
				l.alg = map[byte]floodgate.Rule{}
			}
			if _, ok := l.alg[c]; !ok {
				l.alg[c] = rule
				l.Rules = append(l.Rules, rule)
			}
			seen[c] = rule
		default:
			if len(f) != 3 || len(f[0]) != 1 {
				return bad(errors.New("want: letter, time, duration"))
			}
			rule, ok := seen[f[0][0]]
			if !ok {
				return bad(errors.New("no rule line declares this letter"))
			}
			lo, err1 := strconv.ParseInt(f[1], 10, 64)
			d, err2 := strconv.ParseInt(f[2], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return bad(err)
			}
			if d < 0 {
				return bad(errors.New("negative duration"))
			}
			l.Spans[rule.Name] = append(l.Spans[rule.Name], Span{Lo: lo, Hi: lo + d})
		}
	}
	return nil
}

// ReadFiles reads the logs at paths into one Logs.
func ReadFiles(paths ...string) (*Logs, error) {
	l := &Logs{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("oracle: %w", err)
		}
		if err := l.Read(p, data); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func parseRule(f []string) (byte, floodgate.Rule, error) {
	if len(f) != 7 || len(f[2]) != 1 {
		return 0, floodgate.Rule{}, errors.New("want: # rule letter name limit window burst")
	}
	c := f[2][0]
	var alg floodgate.Algorithm
	found := false
	for a, l := range letters {
		if l == c {
			alg, found = a, true
		}
	}
	if !found {
		return 0, floodgate.Rule{}, fmt.Errorf("unknown letter %q", c)
	}
	limit, err1 := strconv.ParseInt(f[4], 10, 64)
	window, err2 := strconv.ParseInt(f[5], 10, 64)
	burst, err3 := strconv.ParseInt(f[6], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, floodgate.Rule{}, err
	}
	r := floodgate.Rule{Name: f[3], Limit: limit, Window: time.Duration(window), Algorithm: alg, Burst: burst}
	return c, r, r.Validate()
}
