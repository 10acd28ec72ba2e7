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

// Reload reads ConfigDir now, as a change to it would, and reports the
// outcome in the logs and metrics. It returns the refusal, if any; the
// configuration in force then stays. With a fixed Config it does nothing.
func (s *Server) Reload() error {
	if s.watcher == nil {
		return nil
	}
	err := s.watcher.Reload()
	s.reloaded(s.watcher.Config(), err)
	return err
}

// The bounds on what requests can make the service hold.
const (
	MaxGRPCRequestMemory = maxGRPCRequestMemory
	MaxJSONRequestMemory = maxJSONRequestMemory
)
