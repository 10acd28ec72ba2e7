package rlconfig

import "github.com/floodgate-rl/floodgate/internal/rlmatch"

// The tests match requests as the RLS service does, through the module's
// matching code (package rlmatch).

func (c *Config) Match(domain string, entries []rlmatch.Entry) rlmatch.Match {
	return c.m().Match(domain, entries)
}

func (c *Config) MatchAll(domain string, descriptors [][]rlmatch.Entry) []rlmatch.Match {
	return c.m().MatchAll(domain, descriptors)
}

func (c *Config) Limits() []*rlmatch.Limit { return c.m().Limits() }

func (c *Config) CountsOverLimit(domain string) (counts, set bool) {
	return c.m().CountsOverLimit(domain)
}
