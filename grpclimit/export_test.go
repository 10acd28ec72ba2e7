package grpclimit

import "time"

// DefaultGate names the gate of the methods without limits of their own,
// exported for the tests.
const DefaultGate = defaultGate

// MinFailRetryAfter is enforce's least Retry-After of a fail-closed
// denial, as its documentation states it.
const MinFailRetryAfter = 5 * time.Second
