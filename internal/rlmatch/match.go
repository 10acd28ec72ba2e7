package rlmatch

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
)

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Outcome says what a [Match] found.
type Outcome uint8

const (
	// NoLimit: the domain is known but no limit applies. The entries
	// matched nothing, matched a descriptor without a rate limit (which
	// envoyproxy/ratelimit treats as allowed), went deeper than the
	// configuration, or had every limit replaced.
	NoLimit Outcome = iota
	// UnknownDomain: the configuration has no such domain.
	// envoyproxy/ratelimit answers OK and counts it.
	UnknownDomain
	// Unlimited: the descriptor matched an unlimited limit; nothing is
	// counted and the answer is OK.
	Unlimited
	// Limited: one or more limits apply.
	Limited
)

var outcomeNames = [...]string{NoLimit: "no-limit", UnknownDomain: "unknown-domain", Unlimited: "unlimited", Limited: "limited"}

// String returns the outcome's name ("no-limit").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Match is what the configuration says about one descriptor of a
// request.
type Match struct {
	// Outcome is what was found.
	Outcome Outcome
	// Limits are the limits that apply (several with rate_limits), in
	// the order written: empty for NoLimit and UnknownDomain, the one
	// unlimited limit for Unlimited. They are shared and read-only.
	Limits []*Limit
	// Replaced are the limits this descriptor matched that another
	// descriptor's limit replaces; set only by [Config.MatchAll].
	Replaced []*Limit
	// Path is the matched descriptor's path in envoyproxy/ratelimit's
	// form ("messaging.message_type_marketing.to_number"); empty when no
	// descriptor matched every entry.
	Path string
	// Key is the key to count this descriptor's limits under, together
	// with each limit's Rule: it names the domain and every entry with
	// its runtime value, so that different values are counted apart and
	// identical ones together. A share_threshold wildcard level keeps
	// its pattern instead, so all its values share one count. Empty
	// unless Outcome is Limited.
	Key string
	// MetricKey is the key envoyproxy/ratelimit reports statistics under:
	// Path, or the runtime values where detailed_metric (every level) or
	// value_to_metric (that level) ask for them. It can take one value
	// per request value: use it as a metric label only where the
	// configuration asked for detail (DetailedMetric).
	MetricKey string
	// DetailedMetric is the matched descriptor's detailed_metric flag.
	DetailedMetric bool
	// FailureMode is what the limits do when the store cannot decide.
	FailureMode enforce.FailureMode
	// Metadata is the matched descriptor's metadata, as written; shared
	// and read-only.
	Metadata map[string]any
}

// Hits returns one floodgate hit per limit of m that is counted (not
// unlimited, not blocked), each with m.Key and the given cost.
func (m Match) Hits(cost int64) []floodgate.Hit {
	var hits []floodgate.Hit
	for _, l := range m.Limits {
		if l.Unlimited || l.Blocked() {
			continue
		}
		hits = append(hits, floodgate.Hit{Rule: l.Rule, Key: m.Key, Cost: cost})
	}
	return hits
}

// how records how one level matched.
type how uint8

const (
	byValue how = iota
	byWildcard
	byKey
)

// Match returns the limits that apply to one descriptor of a request in
// domain, matched as rlconfig's package doc states (Matching). Replaces
// is not applied here; see [Config.MatchAll].
func (c *Config) Match(domain string, entries []Entry) Match {
	if c == nil {
		return Match{Outcome: UnknownDomain}
	}
	root, ok := c.domains[domain]
	if !ok {
		return Match{Outcome: UnknownDomain}
	}
	if len(entries) == 0 {
		return Match{}
	}
	n := root
	var path []*node
	var hows []how
	for i, e := range entries {
		next, h := n.exact[e], byValue
		if next == nil && strings.Contains(e.Value, "*") {
			// A value written with its "*" is an exact match of that
			// descriptor, as upstream looks it up before any pattern.
			next = n.child(e.Key, e.Value)
		}
		if next == nil {
			for _, w := range n.wild {
				if w.key == e.Key && globMatch(w.glob, e.Value) {
					next, h = w, byWildcard
					break
				}
			}
		}
		if next == nil {
			next, h = n.keyOnly[e.Key], byKey
		}
		if next == nil || (i < len(entries)-1 && !next.hasChildren()) {
			return Match{}
		}
		path = append(path, next)
		hows = append(hows, h)
		n = next
	}
	m := Match{Path: n.path, DetailedMetric: n.detailedMetric, FailureMode: n.failure, Metadata: n.metadata}
	switch {
	case len(n.limits) == 0:
		return m
	case n.unlimited:
		m.Outcome = Unlimited
	default:
		m.Outcome = Limited
		m.Key = hitKey(domain, entries, path)
	}
	m.Limits = n.limits
	m.MetricKey = metricKey(domain, entries, path, hows, n.detailedMetric)
	return m
}

// MatchAll matches each descriptor of one request and then applies
// replaces: a replaced limit moves from Limits to Replaced, and a
// descriptor left with no limits becomes NoLimit.
func (c *Config) MatchAll(domain string, descriptors [][]Entry) []Match {
	ms := make([]Match, len(descriptors))
	replacing := map[string]bool{}
	for i, d := range descriptors {
		ms[i] = c.Match(domain, d)
		for _, l := range ms[i].Limits {
			for _, r := range l.Replaces {
				replacing[r] = true
			}
		}
	}
	if len(replacing) == 0 {
		return ms
	}
	for i := range ms {
		m := &ms[i]
		if m.Outcome != Limited {
			continue
		}
		var keep, dropped []*Limit
		for _, l := range m.Limits {
			if l.Name != "" && replacing[l.Name] {
				dropped = append(dropped, l)
			} else {
				keep = append(keep, l)
			}
		}
		if dropped == nil {
			continue
		}
		m.Limits, m.Replaced = keep, dropped
		if len(keep) == 0 {
			m.Outcome, m.Key = NoLimit, ""
		}
	}
	return ms
}

// globMatch reports whether s matches a value split on its "*"s, each
// "*" standing for any run of bytes, the empty one included.
func globMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return s == parts[0]
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// hitKey builds "domain/key=value/key=value" with every part escaped, so
// no value can make two different descriptors share a key. A part longer
// than longPart is written as its digest (see part).
func hitKey(domain string, entries []Entry, path []*node) string {
	var b strings.Builder
	part(&b, domain)
	for i, e := range entries {
		v := e.Value
		if path[i].shareThreshold {
			v = path[i].value
		}
		b.WriteByte('/')
		part(&b, e.Key)
		b.WriteByte('=')
		part(&b, v)
	}
	return b.String()
}

// longPart is the length from which a part of a key is written as its
// digest: real descriptors' values (an address, a path, a header) are
// shorter, and a flood of long values then costs no escaping, no long
// Redis keys and no long metric labels.
const longPart = 256

// part writes s escaped, or, if it is longPart bytes or more, "%~" and the
// hex SHA-256 of s: escaped text never holds "%~" (an escape is % and two
// hex digits), so no value's key is another's digest.
func part(b *strings.Builder, s string) {
	if len(s) < longPart {
		b.WriteString(url.QueryEscape(s))
		return
	}
	sum := sha256.Sum256([]byte(s))
	b.WriteString("%~")
	b.WriteString(hex.EncodeToString(sum[:]))
}

// metricKey builds envoyproxy/ratelimit's statistics key for a match.
func metricKey(domain string, entries []Entry, path []*node, hows []how, detailed bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		n := path[i]
		b.WriteByte('.')
		b.WriteString(e.Key)
		v := n.value // the configured value: the pattern for a wildcard
		switch {
		case n.shareThreshold:
		case detailed:
			v = e.Value
			if len(v) >= longPart {
				var d strings.Builder
				part(&d, v) // a label of a few dozen bytes, not kilobytes
				v = d.String()
			}
		case n.valueToMetric && hows[i] != byValue:
			v = e.Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
