package floodgate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Algorithm selects how a [Rule] counts requests.
type Algorithm uint8

const (
	// SlidingWindow is an exact sliding-window log: a request is admitted when
	// fewer than Limit requests were admitted in the last Window. It keeps
	// the times of the last Limit admitted requests, 6 bytes each in Redis,
	// so its memory grows with Limit (6 KB a key at 1,000), which is capped at
	// 1,000,000 (and the cost of one hit at 100). It is the zero value and
	// the default.
	SlidingWindow Algorithm = iota
	// TokenBucket is a token bucket of capacity Burst refilled at Limit tokens
	// per Window, computed as GCRA: O(1) state (one timestamp per key) and
	// bursts up to Burst.
	TokenBucket
	// FixedWindow counts requests in consecutive windows aligned to the Unix
	// epoch. It is the cheapest, but a client can make up to 2*Limit requests
	// around a window boundary.
	FixedWindow
	// SlidingWindowCounter approximates the sliding window with two
	// counters (O(1) state per key, like FixedWindow): the count of the
	// current epoch-aligned window plus the previous window's count
	// weighted by the part of it that the sliding window still covers.
	// At a time t into the current window, a request of cost c is admitted
	// when
	//
	//	previous * (Window - t) / Window + current + c <= Limit
	//
	// It assumes the previous window's requests were spread evenly, so it
	// can admit more or fewer than Limit in a sliding window when they
	// were not (BENCHMARKS.md measures it against the exact log); it never
	// admits more than Limit within one fixed window. Use it for high
	// limits, where the exact log costs too much memory. Stores compute it
	// exactly in integers, which requires (Limit+1) * Window, in
	// microseconds, below 2^53 (a limit of 150 million per minute, 2.5
	// million per hour, 100,000 per day).
	SlidingWindowCounter
	// Concurrency limits requests in flight rather than a rate: at most
	// Limit holders of a key at once. An admitted hit is a lease on one
	// slot (Cost slots) until it is released ([Limiter.Refund]) or its
	// time to live, Window, runs out; [Limiter.Renew] extends it while a
	// long request runs. The package documentation's section "Requests in
	// flight" says when to use it and what the time to live means. A lease
	// is an entry of a sliding-window log, so Limit and a hit's cost are
	// bounded as SlidingWindow's, and a Concurrency hit may not be
	// Overdraw.
	Concurrency
)

var algorithmNames = [...]string{
	SlidingWindow:        "sliding-window",
	TokenBucket:          "token-bucket",
	FixedWindow:          "fixed-window",
	SlidingWindowCounter: "sliding-window-counter",
	Concurrency:          "concurrency",
}

// maxCounterProduct bounds (Limit+1) * Window (µs) of a
// SlidingWindowCounter rule: 2^53, below which doubles (Redis's Lua) are
// exact integers.
const maxCounterProduct = 1 << 53

// String returns the algorithm's name, as [Algorithm.UnmarshalText]
// reads it.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// MarshalText returns the algorithm's name, as UnmarshalText reads it:
// with UnmarshalText, it makes an Algorithm a flag (flag.TextVar) and a
// field of JSON or YAML. An algorithm that is none of the five is an error
// wrapping [ErrInvalidRule].
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidRule, int(a))
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText sets a to the algorithm named text ("sliding-window",
// "token-bucket", "fixed-window", "sliding-window-counter" or
// "concurrency"); an unknown name is an error wrapping [ErrInvalidRule],
// and leaves a as it was.
func (a *Algorithm) UnmarshalText(text []byte) error {
	for i, name := range algorithmNames {
		if string(text) == name {
			*a = Algorithm(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown algorithm %q (want sliding-window, token-bucket, fixed-window, sliding-window-counter or concurrency)", ErrInvalidRule, text)
}

func (a Algorithm) valid() bool { return int(a) < len(algorithmNames) }

// logged reports whether a keeps a sliding-window log: SlidingWindow, and
// Concurrency, whose leases are its entries.
func (a Algorithm) logged() bool { return a == SlidingWindow || a == Concurrency }

// Rule is a rate-limit policy: at most Limit requests per Window, counted by
// Algorithm. It is a comparable value, written as a literal
//
//	pix := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute}
//
// or built by [NewRule] or [ParseLimit], which validate it. Every use
// checks it with [Rule.Validate], so an invalid literal fails its first
// decision with [ErrInvalidRule].
type Rule struct {
	// Name names the policy in decisions, headers and metrics ("pix"), and
	// with Algorithm and Window the state of each key ([Store]). 1 to 64
	// bytes of [A-Za-z0-9_.-].
	Name string
	// Limit is the number of requests allowed per Window: 1 to 2^51
	// (1,000,000 for a SlidingWindow or Concurrency rule).
	Limit int64
	// Window is the period the limit applies to: one millisecond to ten
	// years, a whole number of microseconds.
	Window time.Duration
	// Algorithm counts the requests; the zero value is SlidingWindow.
	Algorithm Algorithm
	// Burst is the bucket capacity of a TokenBucket rule: how many requests
	// may come at once after a quiet period, up to 2^51. Zero means Limit.
	// Other algorithms require zero.
	Burst int64
}

// NewRule returns a validated rule named name that allows limit requests
// per window with the given algorithm.
func NewRule(name string, limit int64, window time.Duration, alg Algorithm) (Rule, error) {
	r := Rule{Name: name, Limit: limit, Window: window, Algorithm: alg}
	return r, r.Validate()
}

// Capacity is the most requests the rule can admit at once: Burst for a
// token bucket that sets it, Limit otherwise.
func (r Rule) Capacity() int64 {
	if r.Algorithm == TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Validate reports every problem with r, each wrapping [ErrInvalidRule].
func (r Rule) Validate() error {
	if r.valid() {
		return nil
	}
	return r.problems()
}

// valid reports whether r has no problem: what problems checks, in
// straight-line code, since every decision validates its rule (the
// closure and error slice of problems cost a memstore decision a tenth
// of its instructions). TestValidMatchesProblems holds the two together.
func (r *Rule) valid() bool {
	if r.Name == "" || len(r.Name) > bounds.NameLen || bounds.BadNameByte(r.Name) >= 0 || !r.Algorithm.valid() {
		return false
	}
	if r.Limit < 1 || r.Limit > bounds.Limit || r.Algorithm.logged() && r.Limit > bounds.SlidingLimit {
		return false
	}
	if r.Window < time.Millisecond || r.Window > bounds.Window || r.Window%time.Microsecond != 0 {
		return false
	}
	if r.Algorithm == SlidingWindowCounter && r.Limit >= maxCounterProduct/int64(r.Window/time.Microsecond) {
		return false
	}
	return r.Burst == 0 || r.Burst > 0 && r.Burst <= bounds.Limit && r.Algorithm == TokenBucket && r.Burst/r.Limit <= int64(bounds.Window/r.Window)
}

// problems is Validate's full account of r: every problem, each wrapping
// ErrInvalidRule, or nil.
func (r Rule) problems() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: rule %q: "+format, append([]any{ErrInvalidRule, r.Name}, args...)...))
	}
	if r.Name == "" {
		bad("name is empty")
	} else if len(r.Name) > bounds.NameLen {
		bad("name is %d bytes long, at most %d allowed", len(r.Name), bounds.NameLen)
	} else if i := bounds.BadNameByte(r.Name); i >= 0 {
		bad("name has %q at byte %d; use only A-Z a-z 0-9 _ . -", r.Name[i], i)
	}
	if r.Limit < 1 {
		bad("limit is %d, must be at least 1", r.Limit)
	} else if r.Limit > bounds.Limit {
		bad("limit %d is above %d", r.Limit, bounds.Limit)
	} else if r.Algorithm.logged() && r.Limit > bounds.SlidingLimit {
		bad("limit %d is above %d, the most a sliding-window log keeps per key (%v); use token-bucket or sliding-window-counter for high rate limits", r.Limit, bounds.SlidingLimit, r.Algorithm)
	}
	if r.Window < time.Millisecond {
		bad("window is %v, must be at least 1ms", r.Window)
	} else if r.Window > bounds.Window {
		bad("window is %v, at most %v (ten years) allowed", r.Window, bounds.Window)
	} else if r.Window%time.Microsecond != 0 {
		bad("window %v is not a whole number of microseconds", r.Window)
	}
	if !r.Algorithm.valid() {
		bad("unknown algorithm %v", r.Algorithm)
	}
	if us := int64(r.Window / time.Microsecond); r.Algorithm == SlidingWindowCounter && r.Limit > 0 && us > 0 && r.Limit >= maxCounterProduct/us {
		bad("limit %d per %v is too high for a sliding-window counter ((limit+1) x window in µs must stay below 2^53); shorten the window or use a token bucket", r.Limit, r.Window)
	}
	switch {
	case r.Burst < 0:
		bad("burst is %d, must not be negative", r.Burst)
	case r.Burst > bounds.Limit:
		bad("burst %d is above %d", r.Burst, bounds.Limit)
	case r.Burst > 0 && r.Algorithm != TokenBucket:
		bad("burst is only meaningful for token-bucket, not %v", r.Algorithm)
	case r.Burst > 0 && r.Limit > 0 && r.Window > 0 && r.Burst/r.Limit > int64(bounds.Window/r.Window):
		bad("burst %d takes longer than %v to refill", r.Burst, bounds.Window)
	}
	return errors.Join(errs...)
}

// String formats r as "name: 10/1m0s sliding-window" (with ", burst N" for a
// token bucket that sets Burst).
func (r Rule) String() string {
	s := fmt.Sprintf("%s: %d/%v %v", r.Name, r.Limit, r.Window, r.Algorithm)
	if r.Burst > 0 {
		s += fmt.Sprintf(", burst %d", r.Burst)
	}
	return s
}

// ParseLimit parses a limit spec such as "10/1m", "30/60s", "5/10m" or
// "100/1h" (a positive count, a slash and a Go duration; a bare unit such as
// "10/m" means one of it) into a rule with the given name and algorithm.
func ParseLimit(name, spec string, alg Algorithm) (Rule, error) {
	count, per, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return Rule{}, fmt.Errorf("%w: limit %q: want COUNT/WINDOW such as 10/1m", ErrInvalidRule, spec)
	}
	limit, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return Rule{}, fmt.Errorf("%w: limit %q: count %q is not a whole number", ErrInvalidRule, spec, count)
	}
	unit := per
	if per != "" && (per[0] >= 'a' && per[0] <= 'z' || per[0] >= 'A' && per[0] <= 'Z') {
		unit = "1" + per
	}
	window, err := time.ParseDuration(unit)
	if err != nil {
		// Quote what the user wrote, not the "1" added to a bare unit.
		return Rule{}, fmt.Errorf("%w: limit %q: window %q is not a duration such as 1m or 10s", ErrInvalidRule, spec, per)
	}
	return NewRule(name, limit, window, alg)
}
