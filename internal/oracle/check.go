package oracle

import (
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
)

// DefaultSlack widens every admission's span on both sides before the
// check: the Redis server's TIME, read inside a script, is in whole
// microseconds and may come from a clock reading cached when the server
// began the command, and a Go wall-clock reading on either side of a call
// may be taken a little before or after the instant that matters. A
// millisecond is far more than either and far less than any window the
// oracle runs with.
const DefaultSlack = time.Millisecond

// Report is the check of one key: Over of its Total admissions were past
// the rule's limit.
type Report struct {
	Rule  floodgate.Rule
	Over  int
	Total int
}

// String formats r as the oracle prints it: "over-admissions: N of M".
func (r Report) String() string {
	return fmt.Sprintf("over-admissions: %d of %d", r.Over, r.Total)
}

// Check replays the admissions of rule's key (from every replica, in any
// order) and counts those past the limit.
//
// Each admission is known only to lie in its span, widened by slack on
// both sides. The check is conservative in one direction: it counts an
// admission as past the limit only when the limit is broken wherever in
// their spans the admissions really were, so a correct run counts 0 (no
// placement of the times is a false alarm) however wide the spans are;
// wider spans only hide over-admissions. Each check is greedy: it walks the
// admissions by the latest time they could have been decided, keeps those
// that fit, and counts one past the limit when, together with the kept
// ones, it proves a breach. With exact times (zero-width spans, no slack)
// each is the algorithm's own rule, replayed:
//
//   - SlidingWindow: more than Limit admissions whose spans all lie within
//     less than Window of each other (the log counts an entry while it is
//     less than Window old).
//   - FixedWindow: more than Limit admissions whose spans lie wholly in
//     one window [i*Window, (i+1)*Window) on the Unix epoch (redisstore
//     and memstore index windows by floor(now/Window) on the store's
//     clock). A span across a window's edge counts in neither.
//   - SlidingWindowCounter: an admission at offset t into its window
//     with ceil(prev*(Window-t)/Window) + cur > Limit, where cur counts
//     the current window's admissions up to it (itself included) and
//     prev the previous window's, both only as far as their spans lie
//     wholly in the window, and t taken at the span's end (where the
//     previous window weighs least).
//   - TokenBucket: n admissions in an interval of length d with
//     n > Burst + floor(d/T) (T the emission interval, Window/Limit
//     rounded up to a microsecond, as the stores compute it): the
//     envelope that a GCRA of capacity Burst holds over any interval,
//     and which a replay of the GCRA itself checks exactly. The replay
//     takes each admission at the latest end of its span for the test
//     and at the earliest start (of it and every later one) for the
//     state, so a breach it finds holds in every placement.
func Check(rule floodgate.Rule, spans []Span, slack time.Duration) Report {
	return CheckFrom(rule, spans, slack, 0)
}

// CheckFrom is Check with the fixed windows (of FixedWindow and
// SlidingWindowCounter) at origin + i*Window instead of on the Unix
// epoch: for a limiter whose windows start at its key's first hit, such
// as gubernator's token bucket (bench/guber.go), origin is that first
// window's start modulo Window. The other checks do not depend on it.
func CheckFrom(rule floodgate.Rule, spans []Span, slack, origin time.Duration) Report {
	s := make([]Span, len(spans))
	for i, sp := range spans {
		lo := sp.Lo - int64(slack)
		lo -= lo % 1000 // the store's microseconds are truncated
		s[i] = Span{Lo: lo - int64(origin), Hi: sp.Hi + int64(slack) - int64(origin)}
	}
	// By the latest possible time, as every check walks them.
	slices.SortFunc(s, func(a, b Span) int {
		if a.Hi != b.Hi {
			return compare(a.Hi, b.Hi)
		}
		return compare(a.Lo, b.Lo)
	})
	rep := Report{Rule: rule, Total: len(s)}
	w := int64(rule.Window)
	switch rule.Algorithm {
	case floodgate.SlidingWindow:
		rep.Over = sliding(s, rule.Limit, w)
	case floodgate.FixedWindow:
		rep.Over = fixed(s, rule.Limit, w)
	case floodgate.SlidingWindowCounter:
		rep.Over = counter(s, rule.Limit, w)
	case floodgate.TokenBucket:
		rep.Over = bucket(s, rule.Capacity(), int64(algo.Interval(rule)))
	default:
		panic(fmt.Sprintf("oracle: Check of %v", rule.Algorithm))
	}
	return rep
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// earliest returns, for spans sorted by Hi, the smallest Lo of each span
// and of every span after it: a start that never decreases along the
// walk, no later than any span's own, which lets the checks keep
// monotone pointers and stay sound (a set of spans from i on starts no
// earlier than earliest[i]).
func earliest(s []Span) []int64 {
	e := make([]int64, len(s))
	for i := len(s) - 1; i >= 0; i-- {
		e[i] = s[i].Lo
		if i+1 < len(s) && e[i+1] < e[i] {
			e[i] = e[i+1]
		}
	}
	return e
}

// sliding counts the spans past a sliding-window log's limit: the j-th
// is past it when limit kept ones, with it, start after Hi_j - window.
func sliding(s []Span, limit, window int64) int {
	e := earliest(s)
	var kept []int64 // the earliest starts of the kept spans, ascending
	over, first := 0, 0
	for j, sp := range s {
		if e[j] > sp.Hi-window {
			for first < len(kept) && kept[first] <= sp.Hi-window {
				first++
			}
			if int64(len(kept)-first) >= limit {
				over++
				continue
			}
		}
		kept = append(kept, e[j])
	}
	return over
}

// window returns the index of the fixed window that holds the whole span,
// and false when the span crosses a window's edge.
func window(sp Span, w int64) (int64, bool) {
	i := floorDiv(sp.Lo, w)
	return i, floorDiv(sp.Hi, w) == i
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// fixed counts the admissions past the limit of each fixed window.
func fixed(s []Span, limit, w int64) int {
	count := map[int64]int64{}
	over := 0
	for _, sp := range s {
		i, ok := window(sp, w)
		if !ok {
			continue
		}
		if count[i] >= limit {
			over++
			continue
		}
		count[i]++
	}
	return over
}

// counter replays a sliding-window counter's estimate with the kept
// admissions (see Check).
func counter(s []Span, limit, w int64) int {
	count := map[int64]int64{}
	over := 0
	for _, sp := range s {
		i, ok := window(sp, w)
		if !ok {
			continue
		}
		t := sp.Hi - i*w
		weight := (count[i-1]*(w-t) + w - 1) / w
		if weight+count[i]+1 > limit {
			over++
			continue
		}
		count[i]++
	}
	return over
}

// bucket replays a GCRA of capacity burst and emission interval t over
// the spans (see Check).
func bucket(s []Span, burst, t int64) int {
	e := earliest(s)
	tat := int64(-1 << 62)
	over := 0
	for j, sp := range s {
		next := max(tat, e[j]) + t
		if next-sp.Hi > burst*t {
			over++
			continue
		}
		tat = next
	}
	return over
}
