// Package rlmatch is the model behind package rlconfig, for the packages
// of the module that match requests against a configuration (rls, the
// CLI, internal/xds): it parses envoyproxy/ratelimit's files into a tree
// of descriptors, gives each configured limit its floodgate rule, and
// matches a request's descriptors against the tree.
//
// The format, its extensions, how a request matches and how limits are
// named are stated once, in rlconfig's package doc; this package's docs
// say only what that doc leaves to the implementation. An
// *rlconfig.Config converts to a *Config and back: (*rlmatch.Config)(cfg).
package rlmatch
