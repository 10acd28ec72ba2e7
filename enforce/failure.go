package enforce

import (
	"fmt"
	"sync"
	"time"
)

// FailureMode is what a check does when the store cannot decide in time:
// it is down, frozen, or its circuit breaker is open. It is the one
// failure mode of every surface: HTTP routes and gRPC methods default to
// FailLocal (the zero value), RLS descriptors to FailError (rlconfig's
// failure_mode, as envoyproxy/ratelimit answers). With several modes in
// one check, the strictest decides: closed, then error, then local, then
// open.
type FailureMode uint8

const (
	// FailLocal decides with per-replica in-memory limits: the same rules,
	// counted by each replica on its own from zero, so a fleet of n
	// replicas admits up to n times the limit while the store is down, on
	// top of what the store admitted in the window before it failed. It is
	// the zero value.
	FailLocal FailureMode = iota
	// FailClosed denies the request. For what an unchecked request costs
	// more than a refused one: login, payments.
	FailClosed
	// FailOpen lets the request through, unlimited. For what availability
	// matters more than the limit: reads.
	FailOpen
	// FailError decides nothing and lets the caller decide: the Outcome is
	// Errored, which the RLS service answers with Unavailable (Envoy's
	// failure_mode_deny chooses), HTTP with 503 and gRPC with Unavailable.
	FailError
)

var failureNames = [...]string{FailLocal: "local", FailClosed: "closed", FailOpen: "open", FailError: "error"}

// failureRank orders the modes from the most lenient to the strictest.
var failureRank = [...]uint8{FailOpen: 0, FailLocal: 1, FailError: 2, FailClosed: 3}

// String returns "local", "closed", "open" or "error".
func (m FailureMode) String() string {
	if int(m) < len(failureNames) {
		return failureNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", m)
}

// valid reports whether m is one of the modes.
func (m FailureMode) valid() bool { return int(m) < len(failureNames) }

// ParseFailureMode returns the mode named s: "local", "closed", "open" or
// "error".
func ParseFailureMode(s string) (FailureMode, error) {
	for m, name := range failureNames {
		if s == name {
			return FailureMode(m), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown failure mode %q (want local, closed, open or error)", ErrInvalid, s)
}

// sometimes writes at most one log line per interval and counts the events
// it holds back, in the shape of golang.org/x/time/rate.Sometimes. The
// first event is written at once; the events of the following interval are
// summed into one line written when it ends, so no count is lost. It is
// safe for concurrent use.
type sometimes struct {
	interval time.Duration

	mu      sync.Mutex
	last    time.Time      // guarded by mu; when the last line was written
	held    int            // guarded by mu; events since then not written
	write   func(held int) // guarded by mu; writes the latest held event
	timer   *time.Timer    // guarded by mu; writes the held events when due
	stopped bool           // guarded by mu
}

// do records an event. If a line may be written now, it calls write(n)
// with n the number of earlier events that were held back; otherwise it
// holds the event until the interval ends.
func (s *sometimes) do(now time.Time, write func(held int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer == nil && (s.last.IsZero() || now.Sub(s.last) >= s.interval) {
		s.last = now
		write(s.held) // events held with no timer to write them: after stop
		s.held, s.write = 0, nil
		return
	}
	s.held++
	s.write = write
	if s.timer == nil && !s.stopped {
		s.timer = time.AfterFunc(s.last.Add(s.interval).Sub(now), s.flush)
	}
}

// flush writes the held events as one line: the latest one, saying how
// many more were held.
func (s *sometimes) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	if s.held > 0 {
		s.last = time.Now()
		s.write(s.held - 1)
		s.held, s.write = 0, nil
	}
}

// stop writes any held events now and writes no more summaries.
func (s *sometimes) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.flush()
}
