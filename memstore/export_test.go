package memstore

import "time"

// Tuned returns opts with n shards (rounded up to a power of two) and a
// janitor that runs every sweep; zero keeps the default.
func Tuned(opts Options, n int, sweep time.Duration) Options {
	opts.shards, opts.sweepInterval = n, sweep
	return opts
}

// Len returns the number of keys held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.entries.n
		sh.mu.Unlock()
	}
	return n
}
