package rlmatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// ErrInvalidConfig is rlconfig.ErrInvalidConfig: every problem that
// Parse and ProtoFiles find wraps it.
var ErrInvalidConfig = errors.New("rlconfig: invalid configuration")

// Options tunes Parse.
type Options struct {
	// MergeDomains is rlconfig.Options.MergeDomains.
	MergeDomains bool
	// Skipped is what the directory held and was not read, for
	// [Config.Skipped].
	Skipped []string
}

// Config is a parsed, validated configuration: a set of domains, each a
// tree of descriptors. It is immutable and safe for concurrent use.
// rlconfig.Config is defined on it, so that a package of the module
// converts one into the other: (*rlmatch.Config)(cfg).
type Config struct {
	domains map[string]*node
	limits  []*Limit
	files   []string
	skipped []string
	ignored []string
	over    map[string]bool // count_over_limit, by the domains that set it
}

// node is one descriptor of the tree; a domain's root is a node without
// key.
type node struct {
	key, value string
	glob       []string // value split on "*", when it holds one
	path       string   // envoyproxy/ratelimit's dotted path
	file       string

	exact   map[Entry]*node  // children with a plain value
	wild    []*node          // children with a wildcard value, in file order
	keyOnly map[string]*node // children with no value

	limits         []*Limit
	unlimited      bool
	failure        enforce.FailureMode
	detailedMetric bool
	valueToMetric  bool
	shareThreshold bool
	metadata       map[string]any
}

func newNode(path, file string) *node {
	return &node{path: path, file: file, exact: map[Entry]*node{}, keyOnly: map[string]*node{}}
}

func (n *node) hasChildren() bool {
	return len(n.exact) > 0 || len(n.wild) > 0 || len(n.keyOnly) > 0
}

// child returns the child with exactly this key and configured value.
func (n *node) child(key, value string) *node {
	switch {
	case value == "":
		return n.keyOnly[key]
	case strings.Contains(value, "*"):
		for _, w := range n.wild {
			if w.key == key && w.value == value {
				return w
			}
		}
		return nil
	default:
		return n.exact[Entry{key, value}]
	}
}

func (n *node) add(c *node) {
	switch {
	case c.value == "":
		n.keyOnly[c.key] = c
	case c.glob != nil:
		n.wild = append(n.wild, c)
	default:
		n.exact[Entry{c.key, c.value}] = c
	}
}

// Domains is rlconfig.Config.Domains.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Keys returns the keys of domain's first-level descriptors, sorted: the
// names that rlconfig.Rules counts its live limits under (a key's rule
// keeps the name of the base rule it overrides, which is a first-level
// descriptor's key).
func (c *Config) Keys(domain string) []string {
	if c == nil || c.domains[domain] == nil {
		return nil
	}
	root := c.domains[domain]
	keys := slices.Collect(maps.Keys(root.keyOnly))
	for e := range root.exact {
		keys = append(keys, e.Key)
	}
	for _, n := range root.wild {
		keys = append(keys, n.key)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Limits returns every configured limit, file by file in name order and
// in the order written. The slice is the caller's; the limits are shared
// and read-only.
func (c *Config) Limits() []*Limit {
	if c == nil {
		return nil
	}
	return append([]*Limit(nil), c.limits...)
}

// Files is rlconfig.Config.Files.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.files...)
}

// Skipped is rlconfig.Config.Skipped: [Options].Skipped as Parse got it.
func (c *Config) Skipped() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.skipped...)
}

// CountsOverLimit reports whether domain's file sets count_over_limit,
// and to what. With it true, every hit of the domain counts, even past
// its limit, as envoyproxy/ratelimit counts them by default (a denied
// request extends its own denial, and a charge after the response, as
// Envoy Gateway's costs send it, is recorded in full); without it, the
// service's setting applies.
func (c *Config) CountsOverLimit(domain string) (counts, set bool) {
	if c == nil {
		return false, false
	}
	counts, set = c.over[domain]
	return counts, set
}

// Ignored is rlconfig.Config.Ignored.
func (c *Config) Ignored() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.ignored...)
}

// String is rlconfig.Config.String.
func (c *Config) String() string {
	var b strings.Builder
	for _, l := range c.Limits() {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Parse is rlconfig.Parse, with the Skipped of opts.
func Parse(files map[string][]byte, opts Options) (*Config, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	p := &parser{cfg: &Config{domains: map[string]*node{}, files: names}, opts: opts, domainFile: map[string]string{}}
	for _, name := range names {
		p.file(name, files[name])
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	p.cfg.skipped = opts.Skipped
	return p.cfg, nil
}

type parser struct {
	cfg        *Config
	opts       Options
	domainFile map[string]string
	errs       []error
}

// inherited carries the extension defaults down the tree.
type inherited struct {
	alg     floodgate.Algorithm
	algSet  bool // the file names alg, at this level or above
	burst   int64
	failure enforce.FailureMode
}

func (p *parser) problem(file, path, format string, args ...any) {
	where := file
	if path != "" {
		where += ": " + path
	}
	p.errs = append(p.errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, where, fmt.Sprintf(format, args...)))
}

func (p *parser) file(name string, data []byte) {
	raw, errs := decodeFile(data)
	for _, err := range errs {
		p.errs = append(p.errs, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, name, err))
	}
	if len(errs) > 0 {
		return
	}
	if raw.Domain == "" {
		p.problem(name, "", "domain is empty or missing")
		return
	}
	def := inherited{alg: floodgate.FixedWindow, failure: enforce.FailError}
	if c := raw.CountOverLimit; c != nil {
		if prev, ok := p.cfg.over[raw.Domain]; ok && prev != *c {
			p.problem(name, "", "count_over_limit is %v here and %v in another file of domain %q", *c, prev, raw.Domain)
		}
		if p.cfg.over == nil {
			p.cfg.over = map[string]bool{}
		}
		p.cfg.over[raw.Domain] = *c
	}
	p.extensions(name, raw.Domain, &def, raw.Algorithm, int64(raw.Burst), raw.FailureMode)

	root, seen := p.cfg.domains[raw.Domain]
	if seen && !p.opts.MergeDomains {
		p.problem(name, "", "domain %q is also defined in %s (set MergeDomains to merge them)", raw.Domain, p.domainFile[raw.Domain])
		return
	}
	if !seen {
		root = newNode(raw.Domain, name)
		p.cfg.domains[raw.Domain] = root
		p.domainFile[raw.Domain] = name
	}
	p.descriptors(name, raw.Domain, root, raw.Descriptors, def, nil)
}

// extensions applies a level's algorithm, burst and failure_mode to def.
// An algorithm set at a level resets the burst inherited from above.
func (p *parser) extensions(file, path string, def *inherited, alg string, burst int64, failure string) {
	if alg != "" {
		a, err := parseAlgorithm(alg)
		if err != nil {
			p.problem(file, path, "%v", err)
		} else {
			def.alg, def.burst, def.algSet = a, 0, true
		}
	}
	if burst != 0 {
		def.burst = burst
	}
	if failure != "" {
		m, err := enforce.ParseFailureMode(failure)
		if err != nil {
			p.problem(file, path, "unknown failure_mode %q (want error, closed, open or local)", failure)
		} else {
			def.failure = m
		}
	}
}

// segment is one level of a path: the exact identity of a node, used to
// derive its rule names.
type segment struct{ key, value string }

func (p *parser) descriptors(file, domain string, parent *node, raws []rawDescriptor, def inherited, segs []segment) {
	for i, rd := range raws {
		part := rd.Key
		if rd.Value != "" {
			part += "_" + rd.Value
		}
		path := parent.path + "." + part
		if rd.Key == "" {
			p.problem(file, fmt.Sprintf("%s.descriptors[%d]", parent.path, i), "descriptor has an empty key")
			continue
		}
		if prev := parent.child(rd.Key, rd.Value); prev != nil {
			p.problem(file, path, "duplicate descriptor: key %q with value %q is already defined at this level (in %s)", rd.Key, rd.Value, prev.file)
			continue
		}
		n := newNode(path, file)
		n.key, n.value = rd.Key, rd.Value
		if strings.Contains(rd.Value, "*") {
			n.glob = strings.Split(rd.Value, "*")
		}
		if rd.ShareThreshold && n.glob == nil {
			p.problem(file, path, "share_threshold needs a wildcard value (one holding *)")
		}
		d := def
		p.extensions(file, path, &d, rd.Algorithm, int64(rd.Burst), rd.FailureMode)
		n.failure = d.failure
		n.detailedMetric, n.valueToMetric, n.shareThreshold = rd.DetailedMetric, rd.ValueToMetric, rd.ShareThreshold
		n.metadata = rd.Metadata
		nsegs := append(segs[:len(segs):len(segs)], segment{rd.Key, rd.Value})

		var lims []rawLimit
		switch {
		case rd.RateLimit != nil && rd.RateLimits != nil:
			p.problem(file, path, "set rate_limit or rate_limits, not both")
		case rd.RateLimit != nil:
			lims = []rawLimit{*rd.RateLimit}
		case rd.RateLimits != nil:
			if len(rd.RateLimits) == 0 {
				p.problem(file, path, "rate_limits is empty")
			}
			for j, rl := range rd.RateLimits {
				if rl.Unlimited {
					p.problem(file, fmt.Sprintf("%s.rate_limits[%d]", path, j), "unlimited is not allowed in a rate_limits list; use rate_limit")
				}
			}
			lims = rd.RateLimits
		}
		if rd.ShadowMode && len(lims) == 0 {
			p.cfg.ignored = append(p.cfg.ignored, file+": "+path+": shadow_mode on a descriptor without a rate_limit has no effect; "+
				"the limits of the descriptors under it still deny (set shadow_mode beside each rate_limit)")
		}
		for j, rl := range lims {
			l := p.limit(file, domain, path, nsegs, j, len(lims), rl, rd, d)
			if l == nil {
				continue
			}
			if l.Unlimited {
				n.unlimited = true
			}
			n.limits = append(n.limits, l)
			p.cfg.limits = append(p.cfg.limits, l)
		}
		p.descriptors(file, domain, n, rd.Descriptors, d, nsegs)
		parent.add(n)
	}
}

// limit builds limit number j of count on a descriptor, or reports why
// it cannot and returns nil.
func (p *parser) limit(file, domain, path string, segs []segment, j, count int, rl rawLimit, rd rawDescriptor, def inherited) *Limit {
	where := path
	if count > 1 || rd.RateLimits != nil {
		where = fmt.Sprintf("%s.rate_limits[%d]", path, j)
	}
	bad := func(format string, args ...any) { p.problem(file, where, format, args...) }
	nerr := len(p.errs)

	l := &Limit{Name: rl.Name, Path: path, File: file, Unlimited: rl.Unlimited, ShadowMode: rd.ShadowMode, QuotaMode: rd.QuotaMode}
	if rl.ShadowMode != nil {
		l.ShadowMode = *rl.ShadowMode
	}
	l.Label = l.Name
	if l.Label == "" {
		l.Label = path
		if j > 0 {
			l.Label = fmt.Sprintf("%s#%d", path, j+1)
		}
	}
	for _, r := range rl.Replaces {
		switch {
		case r.Name == "":
			bad("a replaces entry has an empty name")
		case r.Name == rl.Name:
			bad("replaces names the limit itself (%q)", r.Name)
		default:
			l.Replaces = append(l.Replaces, r.Name)
		}
	}
	if rl.Unlimited {
		if rl.Unit != "" {
			if _, ok := parseUnit(rl.Unit); ok {
				bad("unit must not be set on an unlimited limit")
			}
		}
		if rl.Window != "" {
			bad("window must not be set on an unlimited limit")
		}
		if len(p.errs) > nerr {
			return nil
		}
		return l
	}

	var window time.Duration
	switch {
	case rl.Unit != "" && rl.Window != "":
		bad("set unit or window, not both")
	case rl.Unit != "":
		u, ok := parseUnit(rl.Unit)
		if !ok {
			bad("invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", rl.Unit)
		}
		l.Unit, window = u, u.Window()
	case rl.Window != "":
		w, err := time.ParseDuration(rl.Window)
		if err != nil {
			bad("window %q is not a duration such as 90s or 1h30m", rl.Window)
		}
		l.Unit, window = unitOf(w), w
	default:
		bad("a rate limit needs a unit (second, minute, hour, day, week, month or year) or a window")
	}
	switch {
	case rl.RequestsPerUnit == nil:
		bad("requests_per_unit is missing (write 0 to block every request)")
	case *rl.RequestsPerUnit < 0 || *rl.RequestsPerUnit > math.MaxUint32:
		bad("requests_per_unit %d is outside 0 to %d", *rl.RequestsPerUnit, uint32(math.MaxUint32))
	default:
		l.RequestsPerUnit = int64(*rl.RequestsPerUnit)
	}
	d := def
	p.extensions(file, where, &d, rl.Algorithm, int64(rl.Burst), "")
	if len(p.errs) > nerr {
		return nil
	}

	// A blocked limit never reaches a store; its rule is validated as if
	// it admitted one request so the window and algorithm are checked.
	limit := max(l.RequestsPerUnit, 1)
	rule, err := floodgate.NewRule(ruleName(domain, segs, j), limit, window, d.alg)
	if err == nil && d.burst != 0 {
		rule.Burst = d.burst
		err = rule.Validate()
	}
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%w: %s: %s: %w", ErrInvalidConfig, file, where, err))
		return nil
	}
	rule.Limit = l.RequestsPerUnit
	l.Rule, l.AlgorithmSet = rule, d.algSet
	return l
}

// ruleName derives a floodgate rule name for limit j of the node at
// segs: a readable prefix of the domain and path, cut to fit, then a
// hash of the exact domain, path and index. The same node gets the same
// name on every load; two nodes differ in the hash. The limit's value,
// unit and algorithm are not part of it (floodgate keys state by name,
// algorithm and window, so a changed window still starts afresh).
func ruleName(domain string, segs []segment, j int) string {
	h := sha256.New()
	write := func(s string) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	write(domain)
	for _, s := range segs {
		write(s.key)
		write(s.value)
	}
	fmt.Fprintf(h, "#%d", j)
	sum := hex.EncodeToString(h.Sum(nil))[:12]

	var b strings.Builder
	b.WriteString(domain)
	for _, s := range segs {
		b.WriteByte('.')
		b.WriteString(s.key)
		if s.value != "" {
			b.WriteByte('_')
			b.WriteString(s.value)
		}
	}
	prefix := []byte(b.String())
	for i, c := range prefix {
		if !bounds.NameByte(c) {
			prefix[i] = '_'
		}
	}
	const room = bounds.NameLen - 1 - 12
	if len(prefix) > room {
		prefix = prefix[:room]
	}
	return string(prefix) + "-" + sum
}
