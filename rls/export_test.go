package rls

// Bounds the tests check against, exported for them alone.
const (
	MaxDescriptors = maxDescriptors
	MaxEntries     = maxEntries
	MaxMessageSize = maxMessageSize
)
