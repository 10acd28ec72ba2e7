package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
	"github.com/redis/rueidis"
)

// blockedUsage is the usage of floodgate blocked.
const blockedUsage = `  floodgate blocked -rule RULE [-rule RULE]... | -config DIR -domain DOMAIN | -limits-file FILE -domain DOMAIN
                    [-prefix P] [-limit N] [-progress 2s] [-o json]`

// Batch sizes of floodgate blocked: keys asked for per SCAN call, and
// keys peeked per store call.
const (
	scanCount = 1000
	peekBatch = 256
)

// blockedKey is one key found at or over its limit.
type blockedKey struct {
	candidate
	node   string // the Redis node it was found on
	result floodgate.Result
}

// hashed reports a key the store keeps as a digest (keyenc.Encode).
func (b blockedKey) hashed() bool { return strings.HasPrefix(b.key, "~") }

// blocked lists the keys of the given rules that a request would now find
// at or over their limit: floodgate blocked. It SCANs (never KEYS) every
// master, one node at a time on a Cluster, for the rules' state keys
// (rediskeys.StatePattern, ParseStateKey), and asks the store to peek at
// each (redisstore.Store.PeekStored), as the services would: the command
// computes no algorithm and knows no key layout of its own. A key over a
// shadow_mode limit (or any limit of -config under SHADOW_MODE) is listed
// as such, and not counted as blocked: such a limit never denies.
func blocked(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("blocked", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var specs []string
	fs.Func("rule", "a rule: name=NAME,limit=COUNT/WINDOW[,algorithm=ALG][,burst=N] (repeatable)", func(s string) error {
		specs = append(specs, s)
		return nil
	})
	configDir := fs.String("config", "", "a directory of envoyproxy/ratelimit YAML (with -domain)")
	limitsFile := fs.String("limits-file", "", "a library's live limits, envoy-format YAML as rlconfig.NewRules reads it (with -domain)")
	domain := fs.String("domain", "", "the configuration's domain (with -config or -limits-file): every counted limit of it")
	c := commonFlags(fs, "how long to wait for each Redis call")
	prefix, output, timeout := c.prefix, c.output, c.timeout
	limit := fs.Int("limit", 100, "list at most this many keys")
	progress := fs.Duration("progress", 2*time.Second, "a progress line on stderr this often once the scan runs this long (0: never)")
	if err := parseFlags(fs, args, usage); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: blocked takes no arguments, got %q\n%s", errUsage, fs.Args(), usage)
	case *limit < 1:
		return fmt.Errorf("%w: -limit %d: want at least 1", errUsage, *limit)
	case *progress < 0:
		return fmt.Errorf("%w: -progress %v: want zero or more", errUsage, *progress)
	}
	env, err := subcommandEnv(getenv)
	if err != nil {
		return err
	}
	if *configDir == "" && *limitsFile == "" && *domain != "" {
		*configDir = env.ConfigDir // the service's
	}
	rules, err := blockedRules(specs, *configDir, *limitsFile, *domain, env)
	if err != nil {
		return err
	}
	*prefix = cmp.Or(*prefix, env.RedisPrefix)
	if env.PerSecondURL != "" {
		fmt.Fprintln(stderr, "floodgate blocked: REDIS_PERSECOND is true: the limits of one second are kept in REDIS_PERSECOND_URL's Redis, "+
			"which this scan of REDIS_URL's does not read; for them, run it again with REDIS_URL set to REDIS_PERSECOND_URL's value and REDIS_PERSECOND unset")
	}
	// The prefix is checked before anything is dialed.
	if err := (redisstore.Options{URL: env.RedisURL, Prefix: *prefix}).Validate(); err != nil {
		return err
	}
	opt, err := redisopt.FromURL(env.RedisURL, *timeout, 0)
	if err != nil {
		return fmt.Errorf("%w: REDIS_URL: %w", redisstore.ErrInvalidOptions, err)
	}
	opt.ConnWriteTimeout = *timeout
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return fmt.Errorf("redis: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	defer client.Close()
	// The store peeks on the command's client, which it leaves open.
	store, err := redisstore.New(ctx, redisstore.Options{Client: client, Prefix: *prefix})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := rules.loadOverrides(ctx, client, *prefix, *timeout, stderr); err != nil {
		return err
	}
	s := &scanner{
		store: store, client: client, prefix: cmp.Or(*prefix, rediskeys.DefaultPrefix),
		rules: rules, limit: *limit, timeout: *timeout,
		progress: *progress, stderr: stderr, start: time.Now(),
	}
	if err := s.run(ctx); err != nil {
		return err
	}
	return s.report(stdout, stderr, *output)
}

// ruleSet is what floodgate blocked lists the keys of: fixed rules (-rule,
// -config), or a library's live limits (-limits-file), where a key may
// have a limit of its own.
type ruleSet struct {
	byState map[stateID]floodgate.Rule // fixed rules by the state they keep
	one     *floodgate.Rule            // the only fixed rule, if there is one
	live    *rlconfig.Rules            // the live limits' rule of each key
	count   int                        // the rules or limits, for the summary
	names   map[string]bool            // the rules' names
	// shadow are the names of the rules whose limits are in shadow mode
	// (-config: shadow_mode, or SHADOW_MODE): counted, never denying.
	shadow map[string]bool
	// policies are the policies of -config's rules by the rules' names:
	// the limits' rlmatch.Limit.Label, which the service reports. A rule
	// not in it (-rule, -limits-file) is reported under its name, as
	// the services report it.
	policies map[string]string
	// overrides are the per-key overrides (floodgate override) in force
	// of the rules' names, by "<name>:<stored key>": a key that has one
	// is judged by the override's rule, as the services judge it.
	overrides map[string]floodgate.Rule
	// anyWindow: an override has another algorithm or window than the
	// only rule, so that its state keys end otherwise.
	anyWindow bool
}

// stateID is what a state belongs to: a rule's name, algorithm and
// window (floodgate.Store).
type stateID struct {
	name   string
	alg    floodgate.Algorithm
	window time.Duration
}

func idOf(r floodgate.Rule) stateID { return stateID{r.Name, r.Algorithm, r.Window} }

// blockedRules returns the rules floodgate blocked lists the keys of: the
// -rule flags, every counted limit of -domain in -config, or the live
// limits of -domain in -limits-file.
func blockedRules(specs []string, configDir, limitsFile, domain string, env sharedEnv) (*ruleSet, error) {
	var rules []floodgate.Rule
	shadow, policies := map[string]bool{}, map[string]string{}
	switch {
	case configDir != "" && limitsFile != "":
		return nil, fmt.Errorf("%w: give -config or -limits-file, not both", errUsage)
	case configDir == "" && limitsFile == "":
		if domain != "" {
			return nil, fmt.Errorf("%w: -domain needs -config (or CONFIG_DIR, RUNTIME_ROOT) or -limits-file", errUsage)
		}
		if len(specs) == 0 {
			return nil, fmt.Errorf("%w: -rule is required\n%s", errUsage, usage)
		}
		for _, spec := range specs {
			r, err := parseRule(spec)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r)
		}
	default:
		if len(specs) > 0 || domain == "" {
			return nil, fmt.Errorf("%w: -config and -limits-file take -domain, not -rule\n%s", errUsage, usage)
		}
		var cfg *rlconfig.Config
		var err error
		if configDir != "" {
			cfg, err = rlconfig.LoadDir(configDir, rlconfig.Options{MergeDomains: env.MergeDomains})
		} else {
			cfg, err = loadFile(limitsFile)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		for _, l := range (*rlmatch.Config)(cfg).Limits() {
			if l.Unlimited || l.Blocked() || domainOf(cfg.Domains(), l.Path) != domain {
				continue
			}
			rules = append(rules, l.Rule)
			if configDir != "" {
				policies[l.Rule.Name] = l.Label
			}
			// The service's shadow modes; a library's live limits have
			// none (rlconfig.Rules gives a shadow_mode limit no rule).
			if configDir != "" && (l.ShadowMode || env.ShadowMode) {
				shadow[l.Rule.Name] = true
			}
		}
		if len(rules) == 0 {
			return nil, fmt.Errorf("%w: domain %q has no counted limit in %s (domains: %q)", errUsage, domain, cmp.Or(configDir, limitsFile), cfg.Domains())
		}
		if limitsFile != "" {
			// Live limits count under the names of the rules they
			// override: the domain's first-level descriptor keys
			// (rlconfig.Rules), whose overrides apply too.
			rs := &ruleSet{live: rlconfig.NewRules(domain, func() *rlconfig.Config { return cfg }), count: len(rules), names: map[string]bool{}}
			for _, k := range (*rlmatch.Config)(cfg).Keys(domain) {
				rs.names[k] = true
			}
			return rs, nil
		}
	}
	rs := &ruleSet{byState: map[stateID]floodgate.Rule{}, count: len(rules), names: map[string]bool{}, shadow: shadow, policies: policies}
	for _, r := range rules {
		rs.names[r.Name] = true
		if o, dup := rs.byState[idOf(r)]; dup && o != r {
			return nil, fmt.Errorf("%w: rules %v and %v share their keys (one name, algorithm and window): give one", errUsage, o, r)
		}
		rs.byState[idOf(r)] = r
	}
	if len(rs.byState) == 1 {
		rs.one = &rules[0]
	}
	return rs, nil
}

// loadFile reads one file of envoy-format YAML.
func loadFile(file string) (*rlconfig.Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return rlconfig.Parse(map[string][]byte{filepath.Base(file): data}, rlconfig.Options{})
}

// loadOverrides reads the overrides in force of the set's rule names from
// the table of prefix, through client: the services' overrides, which
// floodgate blocked must judge keys by. An invalid entry is skipped, as
// the services skip it, and said on stderr.
func (rs *ruleSet) loadOverrides(ctx context.Context, client rueidis.Client, prefix string, timeout time.Duration, stderr io.Writer) error {
	table, err := overridetable.New(overridetable.Options{Client: client, Prefix: prefix})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer table.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := table.List(cctx)
	if err != nil {
		return err
	}
	for _, b := range l.Invalid {
		fmt.Fprintf(stderr, "floodgate: an invalid override is skipped, as the services skip it: %v\n", b.Err)
	}
	now := time.Now()
	rs.overrides = map[string]floodgate.Rule{}
	for _, e := range l.Entries {
		if !rs.names[e.Rule.Name] || e.ExpiredAt(now) {
			continue
		}
		rs.overrides[e.Rule.Name+":"+keyenc.Encode(e.Key)] = e.Rule
		if rs.one != nil && idOf(e.Rule) != idOf(*rs.one) {
			rs.anyWindow = true
		}
	}
	return nil
}

// pattern is the SCAN pattern of the rules' state keys under prefix: one
// rule's exactly (of any window if an override may have moved a key to
// another), or else every state key, which rule tells apart.
func (rs *ruleSet) pattern(prefix string) string {
	if r := rs.one; r != nil {
		if rs.anyWindow {
			return rediskeys.StatePattern(prefix, floodgate.Rule{Name: r.Name})
		}
		return rediskeys.StatePattern(prefix, *r)
	}
	return rediskeys.StatePattern(prefix, floodgate.Rule{})
}

// rule returns the rule of the state id of stored key, if it is one of
// the set's. A live limit is the rule that the live limits give the key:
// its own limit (a descriptor value), or the name's, counted by the
// service's algorithm unless the file names one. A hashed key is matched
// by its digest, so a value of its own, which the digest hides, is not
// seen: the name's limit applies. A key with an override has the
// override's rule, whatever the set's.
func (rs *ruleSet) rule(id stateID, key string) (floodgate.Rule, bool) {
	if o, ok := rs.overrides[id.name+":"+key]; ok {
		// The override's state is the key's; any other state of the key
		// under the name (the base rule's, of another window) is dormant
		// while the override lasts.
		return o, idOf(o) == id
	}
	if rs.live == nil {
		r, ok := rs.byState[id]
		return r, ok
	}
	// A file that names no algorithm keeps the service's: the key's.
	r, ok := rs.live.Override(floodgate.Rule{Name: id.name, Algorithm: id.alg}, key)
	return r, ok && idOf(r) == id
}

// domainOf returns the domain of a limit's path ("domain.key_value.key"):
// the longest configured domain that starts it.
func domainOf(domains []string, path string) string {
	best := ""
	for _, d := range domains {
		if (path == d || strings.HasPrefix(path, d+".")) && len(d) > len(best) {
			best = d
		}
	}
	return best
}

// scanner is one run of floodgate blocked.
type scanner struct {
	store    *redisstore.Store
	client   rueidis.Client
	prefix   string
	rules    *ruleSet
	limit    int
	timeout  time.Duration
	progress time.Duration
	stderr   io.Writer
	start    time.Time

	nodes    int // masters scanned so far
	scanned  int // state keys of the rules found
	found    []blockedKey
	more     bool      // stopped at the limit with keys left to scan
	reported time.Time // the last progress line
}

// candidate is a state key found by SCAN, with its rule.
type candidate struct {
	rule     floodgate.Rule
	policy   string // the name the services report rule under
	key      string // as in the store: plain, or the digest "~..."
	stateKey string // the Redis key of its state
	override bool   // rule is the key's override
	shadow   bool   // the rule's limit is in shadow mode: it never denies
}

// run scans every master for the rules' state keys.
func (s *scanner) run(ctx context.Context) error {
	nodes, err := s.masters(ctx)
	if err != nil {
		return err
	}
	pattern := s.rules.pattern(s.prefix)
	for _, addr := range slices.Sorted(maps.Keys(nodes)) {
		node := nodes[addr]
		s.nodes++
		var batch []candidate
		cursor := uint64(0)
		for {
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			e, err := node.Do(cctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(scanCount).Build()).AsScanEntry()
			cancel()
			if err != nil {
				return fmt.Errorf("redis %s: scan: %w: %w", addr, floodgate.ErrStoreUnavailable, err)
			}
			for _, k := range e.Elements {
				if c, ok := s.parse(k); ok {
					batch = append(batch, c)
				}
			}
			cursor = e.Cursor
			if len(batch) >= peekBatch || cursor == 0 && len(batch) > 0 {
				if err := s.peek(ctx, addr, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
			if len(s.found) >= s.limit {
				s.more = cursor != 0 || s.nodes < len(nodes) || len(s.found) > s.limit
				s.found = s.found[:s.limit]
				return nil
			}
			s.tick()
			if cursor == 0 {
				break
			}
		}
	}
	return nil
}

// masters returns the nodes to scan by address: every master of a
// Cluster (a replica holds copies of its master's keys), or the one
// server of a standalone or Sentinel client.
func (s *scanner) masters(ctx context.Context) (map[string]rueidis.Client, error) {
	c := s.client
	if c.Mode() != rueidis.ClientModeCluster {
		name := "redis"
		for addr := range c.Nodes() { // one: the server, or Sentinel's master
			name = addr
		}
		return map[string]rueidis.Client{name: c}, nil
	}
	out := map[string]rueidis.Client{}
	for addr, node := range c.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		role, err := node.Do(cctx, node.B().Role().Build()).ToArray()
		cancel()
		if err != nil || len(role) == 0 {
			return nil, fmt.Errorf("redis %s: role: %w: %w", addr, floodgate.ErrStoreUnavailable, cmp.Or(err, errors.New("empty reply")))
		}
		if r, _ := role[0].ToString(); r == "master" {
			out[addr] = node
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redis: %w: no Cluster master answered", floodgate.ErrStoreUnavailable)
	}
	return out, nil
}

// parse returns the candidate of a state key found by SCAN, if it is one
// of the rules'.
func (s *scanner) parse(k string) (candidate, bool) {
	id, key, ok := rediskeys.ParseStateKey(s.prefix, k)
	if !ok {
		return candidate{}, false
	}
	r, ok := s.rules.rule(idOf(id), key)
	_, override := s.rules.overrides[id.Name+":"+key]
	policy := cmp.Or(s.rules.policies[r.Name], r.Name)
	return candidate{rule: r, policy: policy, key: key, stateKey: k, override: override, shadow: s.rules.shadow[r.Name]}, ok
}

// peek asks the store about a batch of keys found on node addr, as they
// are stored (hashed ones by their digest), and keeps those a request
// would find at or over their limit.
func (s *scanner) peek(ctx context.Context, addr string, batch []candidate) error {
	s.scanned += len(batch)
	hits := make([]floodgate.Hit, len(batch))
	for i, c := range batch {
		hits[i] = floodgate.Hit{Rule: c.rule, Key: c.key, Cost: 1}
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	res, err := s.store.PeekStored(cctx, hits)
	cancel()
	if err != nil {
		return fmt.Errorf("peek: %w", err)
	}
	for i, c := range batch {
		if r := res[i]; !r.Allowed {
			s.found = append(s.found, blockedKey{candidate: c, node: addr, result: r})
		}
	}
	return nil
}

// tick writes a progress line when the scan has run long.
func (s *scanner) tick() {
	now := time.Now()
	if s.progress <= 0 || now.Sub(s.start) < s.progress || now.Sub(s.reported) < s.progress {
		return
	}
	s.reported = now
	blocked, _ := s.counts()
	fmt.Fprintf(s.stderr, "floodgate blocked: %v: %d keys of the rules scanned on %d node(s), %d blocked so far\n",
		now.Sub(s.start).Round(time.Millisecond), s.scanned, s.nodes, blocked)
}

// counts returns how many keys found are blocked, and how many are over a
// shadow limit, which never denies.
func (s *scanner) counts() (blocked, shadow int) {
	for _, b := range s.found {
		if b.shadow {
			shadow++
		}
	}
	return len(s.found) - shadow, shadow
}

// hashNote explains the keys shown by their digest.
const hashNote = `keys starting with "~" are hashed: the store keeps a digest of a key longer than 48 bytes
or with bytes other than A-Za-z0-9_.@+=:/-. floodgate reset takes the original key, as the
application spells it, never the digest.`

// report prints what the scan found, sorted by policy, rule and key:
// each key under the policy the services report its limit by, with the
// rule (the store's) beside it where its name is another.
func (s *scanner) report(stdout, stderr io.Writer, output string) error {
	slices.SortFunc(s.found, func(a, b blockedKey) int {
		return cmp.Or(cmp.Compare(a.policy, b.policy), cmp.Compare(a.rule.Name, b.rule.Name), cmp.Compare(a.rule.Window, b.rule.Window), cmp.Compare(a.key, b.key))
	})
	blocked, shadow := s.counts()
	summary := fmt.Sprintf("%d key(s) blocked; %d key(s) of %d rule(s) scanned on %d node(s) in %v",
		blocked, s.scanned, s.rules.count, s.nodes, time.Since(s.start).Round(time.Millisecond))
	if shadow > 0 {
		summary += fmt.Sprintf("; %d key(s) over a shadow_mode limit, which never denies: not blocked", shadow)
	}
	if s.more {
		summary += fmt.Sprintf("; stopped at -limit %d: more keys may be blocked", s.limit)
	}
	if output == "json" {
		for _, b := range s.found {
			remaining, over := clampRemaining(b.result.Remaining)
			v := map[string]any{
				"rule": b.rule.String(), "policy": b.policy, "key": b.key, "hashed": b.hashed(), "override": b.override, "node": b.node,
				"state_key": b.stateKey, "shadow": b.shadow,
				"remaining": remaining, "over_by": over, "retry_after_ms": b.result.RetryAfter.Milliseconds(),
				"reset_after_ms": b.result.ResetAfter.Milliseconds(),
			}
			if b.rule.Algorithm == floodgate.Concurrency {
				v["holders"] = holders(b.rule, b.result.Allowed, b.result.Remaining)
			}
			if err := report(stdout, "json", v, ""); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintln(stderr, "floodgate blocked:", summary)
		return err
	}
	// A RULE column when a policy is not its rule's name (-config).
	ruled := slices.ContainsFunc(s.found, func(b blockedKey) bool { return b.policy != b.rule.Name })
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	header := "POLICY\tKEY\tREMAINING\tRETRY-AFTER\tRESET"
	if ruled {
		header += "\tRULE"
	}
	fmt.Fprintln(tw, header)
	hashed := false
	for _, b := range s.found {
		key := b.key
		if b.hashed() {
			key += " (hashed)"
			hashed = true
		}
		if b.override {
			key += fmt.Sprintf(" (override %d/%v)", b.rule.Limit, b.rule.Window)
		}
		if b.shadow {
			key += " (shadow: never denied)"
		}
		if b.rule.Algorithm == floodgate.Concurrency {
			key += fmt.Sprintf(" (%d holders)", holders(b.rule, b.result.Allowed, b.result.Remaining))
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%v\t%v", b.policy, key, remainingText(b.result.Remaining),
			b.result.RetryAfter.Round(time.Millisecond), b.result.ResetAfter.Round(time.Millisecond))
		if ruled {
			line += "\t" + b.rule.Name
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if hashed {
		fmt.Fprintln(stdout, hashNote)
	}
	_, err := fmt.Fprintln(stdout, summary)
	return err
}
