package rlconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// ErrInvalidConfig is wrapped by every problem that Parse, LoadDir and
// the Watcher find in a configuration.
var ErrInvalidConfig = errors.New("rlconfig: invalid configuration")

// MaxFileSize bounds the size of one configuration file that LoadDir and
// the Watcher read: 16 MiB, sixteen times what a Kubernetes ConfigMap
// holds.
const MaxFileSize = 16 << 20

// Options tunes how a configuration is read. The zero value reads it as
// envoyproxy/ratelimit does by default.
type Options struct {
	// MergeDomains lets several files define descriptors of one domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. A key/value
	// defined twice at one level is still refused. The zero value
	// refuses a domain that appears in two files.
	MergeDomains bool
}

// Config is a parsed, validated configuration: a set of domains, each a
// tree of descriptors. It is immutable and safe for concurrent use.
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

// Domains returns the configured domains, sorted.
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

// Limits returns every configured limit, file by file in name order and
// in the order written. The slice is the caller's; the limits are shared
// and read-only.
func (c *Config) Limits() []*Limit {
	if c == nil {
		return nil
	}
	return append([]*Limit(nil), c.limits...)
}

// Files returns the names of the files the configuration was read from,
// sorted.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.files...)
}

// Skipped returns what [LoadDir] or a [Watcher] found in the directory
// and did not read, sorted: files not named *.yaml or *.yml, and
// subdirectories (with a trailing "/"); dot files are not listed.
// envoyproxy/ratelimit reads every file of its directory, subdirectories
// included, so a service switching from it should warn of each.
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

// Ignored lists the settings of the configuration that have no effect
// where they are written, each as "file: path: what", in file order:
// shadow_mode on a descriptor without a rate_limit, which
// envoyproxy/ratelimit accepts and ignores, so its children's limits
// deny. A service loading the configuration should warn of each.
func (c *Config) Ignored() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.ignored...)
}

// String lists the configuration's limits, one a line.
func (c *Config) String() string {
	var b strings.Builder
	for _, l := range c.Limits() {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// LoadDir reads every *.yaml and *.yml file in dir (not its
// subdirectories, and not names starting with a dot, such as the
// ..data entries of a Kubernetes ConfigMap volume; symbolic links are
// followed, and a dangling one is a removed file) and parses them
// together with [Parse]. In a ConfigMap volume (dir holds a ..data link
// to a directory), the files of the version that ..data names are read,
// all of one version, with any file of dir that is not a link into
// ..data. A file that is not a regular file (a FIFO, a
// device) or holds more than [MaxFileSize] bytes is refused.
func LoadDir(dir string, opts Options) (*Config, error) {
	files, skipped, err := readDir(dir, "")
	if err != nil {
		return nil, err
	}
	return parseDir(files, skipped, opts)
}

// parseDir parses the files of a directory and records what it skipped.
func parseDir(files map[string][]byte, skipped []string, opts Options) (*Config, error) {
	cfg, err := Parse(files, opts)
	if err != nil {
		return nil, err
	}
	cfg.skipped = skipped
	return cfg, nil
}

// readDir reads the configuration files of dir, or only the one named
// only when it is not empty. It also returns, sorted, the names of what
// it did not read (see [Config.Skipped]); none with only.
//
// A Kubernetes ConfigMap volume holds its files in the directory that its
// ..data link names, swapped whole on each update; the names in dir are
// links into ..data, made and removed around the swap. Those files are
// read from one resolution of ..data (a version never changes, it is
// only removed after the next swap; one removed mid-read is read again
// from the next), so that a read never mixes two versions (a domain
// moved from one file to another would be lost or doubled) nor misses a
// file whose link is not made yet. An entry of dir that is not a link
// into ..data is read as in any directory, and wins over the version's
// file of its name.
func readDir(dir, only string) (map[string][]byte, []string, error) {
	link := filepath.Join(dir, "..data")
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		return readFiles(dir, only, plain) // not a ConfigMap volume
	}
	for range 100 {
		data, err := filepath.EvalSymlinks(link)
		var st os.FileInfo
		if err == nil {
			st, err = os.Stat(data)
		}
		if errors.Is(err, os.ErrNotExist) {
			time.Sleep(time.Millisecond) // swapped and removed meanwhile
			continue
		}
		if err != nil || !st.IsDir() {
			return readFiles(dir, only, plain) // ..data names no directory
		}
		// A version never changes once ..data names it; it is only
		// removed after the next swap. Read whole, it is one version.
		files, skipped, err := readFiles(data, only, asVersion)
		if errors.Is(err, errVanished) {
			time.Sleep(time.Millisecond) // swapped and removed: read the next one
			continue
		}
		if again, _ := filepath.EvalSymlinks(link); again != data {
			// Swapped during the read: the version may have lost files
			// to its removal before the listing, which no read error
			// shows. Still named after the read, it was whole.
			time.Sleep(time.Millisecond)
			continue
		}
		if err == nil {
			var own map[string][]byte
			var ownSkipped []string
			own, ownSkipped, err = readFiles(dir, only, skipViews)
			maps.Copy(files, own)
			skipped = slices.Compact(slices.Sorted(slices.Values(append(skipped, ownSkipped...))))
		}
		return files, skipped, err
	}
	// Removed under each of 100 reads: no version could be read whole,
	// and the one in force stays.
	return nil, nil, fmt.Errorf("rlconfig: %s: each version vanished while it was read, 100 times", link)
}

// errVanished reports a ConfigMap version removed while it was read.
var errVanished = errors.New("rlconfig: the version vanished while it was read")

// How readFiles reads a directory.
const (
	plain     = iota // any directory: a file gone since the listing is a removed file
	asVersion        // a ConfigMap version: a file gone is the version removed (errVanished)
	skipViews        // a ConfigMap volume: its links into ..data are skipped
)

// readFiles reads the configuration files of dir, as readDir does, in
// one of the modes plain, asVersion and skipViews.
func readFiles(dir, only string, mode int) (map[string][]byte, []string, error) {
	ents, err := os.ReadDir(dir)
	if mode == asVersion && errors.Is(err, os.ErrNotExist) {
		return nil, nil, errVanished
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rlconfig: read directory: %w", err)
	}
	files := map[string][]byte{}
	var skipped []string
	for _, e := range ents {
		name := e.Name()
		yaml := strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
		if strings.HasPrefix(name, ".") || only != "" && name != only {
			continue
		}
		p := filepath.Join(dir, name)
		if mode == skipViews {
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(filepath.Clean(t), "..data"+string(filepath.Separator)) {
				continue // the version's file, read from ..data
			}
		}
		st, err := os.Stat(p) // follows a symbolic link
		if errors.Is(err, os.ErrNotExist) {
			if mode == asVersion {
				return nil, nil, errVanished
			}
			// Removed since the listing, or a link left dangling for a
			// moment by a ConfigMap update: the file is gone.
			continue
		}
		if err != nil {
			if !yaml {
				skipped = append(skipped, name)
				continue
			}
			return nil, nil, fmt.Errorf("rlconfig: %w", err)
		}
		if st.IsDir() {
			skipped = append(skipped, name+"/")
			continue
		}
		if !yaml {
			skipped = append(skipped, name)
			continue
		}
		if !st.Mode().IsRegular() {
			// A FIFO would block the read for ever, a device never end.
			return nil, nil, fmt.Errorf("%w: %s: not a regular file (%v)", ErrInvalidConfig, p, st.Mode().Type())
		}
		if st.Size() > MaxFileSize {
			return nil, nil, fmt.Errorf("%w: %s: %d bytes, more than the %d a configuration file may hold", ErrInvalidConfig, p, st.Size(), MaxFileSize)
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			if mode == asVersion {
				return nil, nil, errVanished
			}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("rlconfig: %w", err)
		}
		files[name] = data
	}
	sort.Strings(skipped)
	return files, skipped, nil
}

// Parse reads a configuration from files (file name to contents), each
// holding one domain in envoyproxy/ratelimit's format with floodgate's
// extensions. It validates them whole: the error lists every problem of
// every file, each naming its file and descriptor path and wrapping
// [ErrInvalidConfig] (and [floodgate.ErrInvalidRule] where floodgate
// refuses a limit). An empty set of files is a valid, empty
// configuration.
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
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			prefix[i] = '_'
		}
	}
	const room = bounds.NameLen - 1 - 12
	if len(prefix) > room {
		prefix = prefix[:room]
	}
	return string(prefix) + "-" + sum
}
