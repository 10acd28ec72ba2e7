package breakerstore

// SetRunnable replaces the scheduler reading of s (see clock.starved), so
// that tests decide whether the process is short of CPU.
func SetRunnable(s *Store, runnable func() int) { s.clock.runnable = runnable }

// ReadRunnable exposes the runtime reading itself.
func ReadRunnable(s *Store) int { return s.clock.readRunnable() }

// DefaultFailures is Options.Failures's default, for the tests.
const DefaultFailures = defaultFailures
