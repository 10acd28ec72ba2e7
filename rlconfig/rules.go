package rlconfig

import (
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

// Rules gives a library's limits their rules from a configuration that
// may change while the process runs: live limits, as a floodgate.Overrides
// of the Limiter (floodgate.Options.Overrides; floodgate.Overlay puts
// per-key overrides over them). The rule of the limit named N for key K
// is that of the descriptor (N, K) in the domain:
//
//	domain: bank
//	descriptors:
//	  - key: pix                 # every account: 10 a minute
//	    rate_limit: {unit: minute, requests_per_unit: 10}
//	  - key: pix                 # account 42 alone: 100 a minute
//	    value: acct-42
//	    rate_limit: {unit: minute, requests_per_unit: 100}
//
// matched as a one-entry descriptor (see Matching in the package doc).
// The rule keeps the name N, so a changed limit keeps the key's counts
// ([floodgate.Store] says what starts them afresh). A file that names no
// algorithm (at the limit's level or above) keeps the limit's own
// algorithm and burst, and sets only the limit and the window: the fixed
// window that envoyproxy/ratelimit counts by default would otherwise
// replace an exact sliding window unasked. No rule (false) when nothing
// matches, or the match is unlimited, blocked (requests_per_unit: 0) or
// in shadow_mode, which a library limit's rule cannot express: the
// limit's own rule then applies. The first limit of a rate_limits list
// is the one taken. Rules is safe for concurrent use.
type Rules struct {
	domain string
	config func() *Config
}

var _ floodgate.Overrides = (*Rules)(nil)

// NewRules returns the rules of domain in the configuration that config
// returns on each call: a [Watcher]'s Config method, for limits that
// follow the files, or a function returning one parsed Config.
func NewRules(domain string, config func() *Config) *Rules {
	return &Rules{domain: domain, config: config}
}

// Override returns the rule that the configuration gives key in place of
// base, and whether it gives one.
func (r *Rules) Override(base floodgate.Rule, key string) (floodgate.Rule, bool) {
	m := r.config().m().Match(r.domain, []rlmatch.Entry{{Key: base.Name, Value: key}})
	if m.Outcome != rlmatch.Limited {
		return floodgate.Rule{}, false
	}
	l := m.Limits[0]
	if l.Unlimited || l.Blocked() || l.ShadowMode {
		return floodgate.Rule{}, false
	}
	if !l.AlgorithmSet {
		rule := base
		rule.Limit, rule.Window = l.Rule.Limit, l.Rule.Window
		return rule, true
	}
	rule := l.Rule
	rule.Name = base.Name
	return rule, true
}
