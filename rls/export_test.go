package rls

import "time"

// WithDebounce returns opts with the Watcher's quiet time before a reload
// set to d.
func WithDebounce(opts Options, d time.Duration) Options {
	opts.debounce = d
	return opts
}

// Bounds the tests check against, exported for them alone.
const (
	MaxDescriptors = maxDescriptors
	MaxEntries     = maxEntries
	MaxMessageSize = maxMessageSize
)
