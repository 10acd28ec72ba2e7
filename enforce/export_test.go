package enforce

// Bounds the tests check against, exported for them alone.
const (
	MinFailRetryAfter = minFailRetryAfter
	MaxPolicyLabels   = maxPolicyLabels
)
