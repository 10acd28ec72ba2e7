package grpclimit

import "time"

// DefaultGate names the gate of the methods without limits of their own,
// exported for the tests.
const DefaultGate = defaultGate

// MinFailRetryAfter is enforce's least Retry-After of a fail-closed
// denial, as its documentation states it.
const MinFailRetryAfter = 5 * time.Second

// MaxStrays and MaxStrayLen bound the names of the unlisted methods
// called that an Interceptors remembers.
const (
	MaxStrays   = maxStrays
	MaxStrayLen = maxStrayLen
)

// Strays returns how many names of unlisted methods l remembers.
func (l *Interceptors) Strays() int {
	n := 0
	l.strays.names.Range(func(any, any) bool { n++; return true })
	return n
}
