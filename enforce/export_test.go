package enforce

import "time"

// Bounds the tests check against, exported for them alone.
const (
	MinFailRetryAfter = minFailRetryAfter
	MaxPolicyLabels   = maxPolicyLabels
)

// SetLogInterval sets the least time between two log lines of g's
// degraded decisions, before g decides anything: the tests' short one.
func SetLogInterval(g *Gate, d time.Duration) { g.log.interval = d }
