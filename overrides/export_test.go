package overrides

// NewWithClock is New with the clock that expires the overrides.
var NewWithClock = newTable

// Len is the number of overrides in s.
func (s *Set) Len() int { return s.len() }

// Len is the number of overrides loaded last.
func (t *Table) Len() int { return t.set.Load().len() }

// WithReloadEvery returns opts with a full load every n refreshes.
func WithReloadEvery(opts Options, n int) Options {
	opts.reloadEvery = n
	return opts
}
