// Command floodgate operates floodgate's limits from a shell: it reads a
// key's state and unlocks it, in the store the services share.
//
//	floodgate peek  -rule 'name=login,limit=5/10m' alice     what a request of alice would get now
//	floodgate reset -rule 'name=login,limit=5/10m' alice     forget alice's count: unlock her
//	floodgate peek  -config DIR -domain rl user=alice       the limits of a descriptor, from the service's configuration
//	floodgate blocked -rule 'name=login,limit=5/10m'        the keys a request would now find denied (blocked.go)
//	floodgate override set -rule api -limit 1000/1m cust-42  give one key a limit of its own, in every replica within 5s (override.go)
//
// The key is spelled as the application spells it; floodgate encodes it
// as the store does, so a hashed key never has to be typed. A rule is
// "name=NAME,limit=COUNT/WINDOW" with optional ",algorithm=ALG" (the
// default is sliding-window) and ",burst=N" (token-bucket): the same rule
// as the service's (floodgate.Store says which parts of a rule name a
// key's state). For a limit on requests in flight
// (",algorithm=concurrency", COUNT holders, WINDOW the leases' time to
// live), peek tells how many leases hold the key and blocked lists the
// keys at their limit of holders. The environment is read as the service reads it
// (env.go): Redis is REDIS_URL (redisstore's URL forms, or
// envoyproxy/ratelimit's HOST:PORT with REDIS_AUTH, REDIS_TLS,
// REDIS_TYPE, REDIS_SOCKET_TYPE), -prefix defaults to CACHE_KEY_PREFIX,
// and -config to CONFIG_DIR (or RUNTIME_ROOT/...), so that a subcommand
// run in the service's container finds what the service finds. -o json
// prints JSON for scripts. With -config (a directory of
// envoyproxy/ratelimit YAML, as the service reads it) and -domain, the
// arguments are a descriptor's entries, KEY=VALUE, and every limit that
// applies to it is peeked or reset; a limit in shadow mode (shadow_mode,
// or SHADOW_MODE) never denies, and is reported so.
//
// A key with an override (floodgate override) is peeked at or reset under
// the override's rule, as the services decide it, with a note on stderr;
// floodgate blocked judges it by the override too, and marks it.
//
// What the command cannot see: a rule given with another name, window or
// algorithm than the service's reads a fresh key; a service with a
// denial cache keeps a denial it cached until its Retry-After runs out,
// even after a reset or an override, and reset and override say for how
// long at most (longestWait). Each limit is named by the policy the
// service reports it by, and what is left is never below zero, as the
// service reports it, with the excess of a key over its limit beside it
// ("0 (7 over)"). -o json writes
// one object per line, one per limit (docs/OPERATIONS.md lists the
// fields); a key that starts with "-" goes after "--".
//
// Exit status: 0 done (or help shown: -h, help), 1 Redis failed or could
// not be reached, 2 bad input.
//
// Run with no subcommand (or "serve", or only -config-dir DIR), floodgate
// is the rate-limit service: Envoy's RLS v3 over gRPC and POST /json,
// configured from the environment (serve.go; docs/SERVICE.md).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/algo"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// errUsage marks bad input: exit status 2.
var errUsage = errors.New("usage")

// helpRequested is the error of a subcommand asked for help (-h, -help):
// its usage goes to stdout, and the exit status is 0.
type helpRequested struct{ usage string }

func (h helpRequested) Error() string { return "help requested" }

// parseFlags parses args into fs: an error wrapping errUsage that shows
// usage, or helpRequested when the user asked for help.
func parseFlags(fs *flag.FlagSet, args []string, usage string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return helpRequested{usage}
	case err != nil:
		return fmt.Errorf("%w: %v\n%s", errUsage, err, usage)
	}
	return nil
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h"
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "help" || isHelpFlag(args[0])) {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if serving(args) {
		return serve(ctx, args, getenv, stderr, serveHooks{})
	}
	err := dispatch(ctx, args, getenv, stdout, stderr)
	var help helpRequested
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprintln(stdout, help.usage)
		return 0
	case errors.Is(err, errUsage) || errors.Is(err, floodgate.ErrInvalidRule) || errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, redisstore.ErrInvalidOptions):
		fmt.Fprintln(stderr, "floodgate:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "floodgate:", err)
		return 1
	}
}

const usage = `usage:
  floodgate [serve] [-config-dir DIR]    the rate-limit service, configured from the environment (docs/SERVICE.md)
  floodgate peek|reset -rule 'name=NAME,limit=COUNT/WINDOW[,algorithm=ALG][,burst=N]' [-prefix P] [-o json] KEY
  floodgate peek|reset -config DIR -domain DOMAIN [-prefix P] [-o json] KEY=VALUE...
` + blockedUsage + `
  floodgate override set|get|rm|ls ...   per-key limits (floodgate override for its usage)
Redis is REDIS_URL (with REDIS_AUTH, REDIS_TLS, REDIS_TYPE), -prefix CACHE_KEY_PREFIX
and -config CONFIG_DIR (or RUNTIME_ROOT/...) by default, as the service reads them.`

// common holds the flags that every subcommand of the store takes.
type common struct {
	prefix, output *string
	timeout        *time.Duration
}

// commonFlags defines -prefix, -o and -timeout on fs.
func commonFlags(fs *flag.FlagSet, timeoutHelp string) common {
	return common{
		prefix:  fs.String("prefix", "", "the services' key prefix (default CACHE_KEY_PREFIX, else redisstore's)"),
		output:  fs.String("o", "text", "output: text or json"),
		timeout: fs.Duration("timeout", 5*time.Second, timeoutHelp),
	}
}

// check refuses an -o other than text or json and a -timeout that is not
// positive (which would fail every Redis call, reported as Redis's fault).
func (c common) check() error {
	switch {
	case *c.output != "text" && *c.output != "json":
		return fmt.Errorf("%w: -o %q: want text or json", errUsage, *c.output)
	case *c.timeout <= 0:
		return fmt.Errorf("%w: -timeout %v: want a positive duration", errUsage, *c.timeout)
	}
	return nil
}

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no subcommand\n%s", errUsage, usage)
	}
	cmd, args := args[0], args[1:]
	if cmd == "override" {
		return overrideCmd(ctx, args, getenv, stdout)
	}
	if cmd == "blocked" {
		return blocked(ctx, args, getenv, stdout, stderr)
	}
	if cmd != "peek" && cmd != "reset" {
		return fmt.Errorf("%w: unknown subcommand %q\n%s", errUsage, cmd, usage)
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ruleSpec := fs.String("rule", "", "the rule: name=NAME,limit=COUNT/WINDOW[,algorithm=ALG][,burst=N]")
	configDir := fs.String("config", "", "a directory of envoyproxy/ratelimit YAML (with -domain)")
	domain := fs.String("domain", "", "the configuration's domain (with -config)")
	c := commonFlags(fs, "how long to wait for Redis")
	prefix, output, timeout := c.prefix, c.output, c.timeout
	if err := parseFlags(fs, args, usage); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	env, err := subcommandEnv(getenv)
	if err != nil {
		return err
	}
	hits, err := target(*ruleSpec, *configDir, *domain, fs.Args(), env)
	if err != nil {
		return err
	}
	*prefix = cmp.Or(*prefix, env.RedisPrefix)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if hits, err = withOverrides(ctx, env.RedisURL, *prefix, *timeout, hits, stderr); err != nil {
		return err
	}
	store, err := redisstore.New(ctx, redisstore.Options{URL: env.RedisURL, Prefix: *prefix})
	if err != nil {
		return err
	}
	defer store.Close()
	var st floodgate.Store = store
	if env.PerSecondURL != "" { // the limits of one second in their Redis, as the service keeps them (persecond.go)
		ps, err := redisstore.New(ctx, redisstore.Options{URL: env.PerSecondURL, Prefix: *prefix})
		if err != nil {
			return err
		}
		defer ps.Close()
		st = &perSecondStore{other: store, second: ps, rollbackTimeout: *timeout}
	}
	limiter, err := floodgate.New(st, floodgate.Options{Timeout: *timeout})
	if err != nil {
		return err
	}
	if cmd == "peek" {
		return peek(ctx, limiter, hits, *prefix, *output, stdout)
	}
	for _, h := range hits {
		if err := reset(ctx, limiter, h, *prefix, *output, stdout); err != nil {
			return err
		}
	}
	return nil
}

// peek asks enforce about every hit at once, as the service would decide
// a request now, recording nothing, and reports each hit's verdict. A
// shadow limit is asked as an enforced one, so that its figures are there
// even when another limit is over (the service would not ask it then).
func peek(ctx context.Context, limiter *floodgate.Limiter, hits []targetHit, prefix, output string, stdout io.Writer) error {
	e, err := enforce.New(enforce.Options{Limiter: limiter, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer e.Close()
	g, err := e.Gate(enforce.Spec{Name: "peek"})
	if err != nil {
		return err
	}
	ehits := make([]enforce.Hit, len(hits))
	for i, h := range hits {
		ehits[i] = enforce.Hit{Hit: h.Hit, Policy: h.policy, Failure: enforce.FailError, Peek: true}
	}
	res, err := g.Check(ctx, ehits)
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	for i, h := range hits {
		if err := peeked(h, res.Each[i], prefix, output, stdout); err != nil {
			return err
		}
	}
	return nil
}

// subcommandEnv reads the environment a subcommand shares with the
// service (readEnv): a bad variable, as the service refuses it, or no
// REDIS_URL is an error wrapping errUsage.
func subcommandEnv(getenv func(string) string) (sharedEnv, error) {
	env, errs := readEnv(getenv)
	if err := errors.Join(errs...); err != nil {
		return env, fmt.Errorf("%w: %w", errUsage, err)
	}
	if env.RedisURL == "" {
		return env, fmt.Errorf("%w: REDIS_URL is empty: set it to the services' Redis", errUsage)
	}
	return env, nil
}

// longestWait is the longest Retry-After a denial under r can carry: a
// window for a sliding or fixed window, two for a sliding-window counter
// (the next window still weighs the last one), and the refill of the whole
// bucket for a token bucket (algo.Life of the capacity). A service's
// denial cache keeps a denial at most until its Retry-After runs out
// (floodgate.Options.DenialCacheSize), and a Reset or an override through
// another process does not clear it: so a denial of a key under r, cached
// before a reset, lasts at most this long after it.
func longestWait(r floodgate.Rule) time.Duration { return algo.Life(r, r.Capacity()) }

// cachedDenialNote says how long at most (wait) a service's denial cache
// may keep denying a key after what the command did; a zero wait, which
// the command could not tell, is said in words.
func cachedDenialNote(after string, wait time.Duration) string {
	most := wait.String()
	if wait == 0 {
		most = "the rule's longest Retry-After (its window; two for sliding-window-counter; a whole bucket's refill for token-bucket)"
	}
	return fmt.Sprintf("A service with a denial cache (DENIAL_CACHE_SIZE, LOCAL_CACHE_SIZE_IN_BYTES) may still deny the key "+
		"from a denial it cached before %s, for at most %s.", after, most)
}

// reset resets the key of one hit, and reports it.
func reset(ctx context.Context, limiter *floodgate.Limiter, h targetHit, prefix, output string, stdout io.Writer) error {
	rule, key := h.Rule, h.Key
	stateKey, err := rediskeys.StateKey(prefix, rule, key)
	if err != nil {
		return err
	}
	if err := limiter.Reset(ctx, rule, key); err != nil {
		return err
	}
	wait := longestWait(rule)
	return report(stdout, output, map[string]any{
		"policy": h.policy, "rule": rule.String(), "key": key, "reset": true, "state_key": stateKey, "cached_denial_max_ms": wait.Milliseconds(),
	}, fmt.Sprintf("reset %s for key %q: its count is forgotten (Redis key %s deleted).\n%s\n", named(h.policy, rule), key, stateKey, cachedDenialNote("the reset", wait)))
}

// peeked reports the verdict v of a peek at hit h. Its figures are the
// key's as it stands; the report says what a request now would leave,
// one less when it would be allowed.
func peeked(h targetHit, v enforce.Verdict, prefix, output string, stdout io.Writer) error {
	rule, key, d := v.Hit.Rule, h.Key, v.Decision
	stateKey, err := rediskeys.StateKey(prefix, rule, key)
	if err != nil {
		return err
	}
	after := d.Remaining // what a request now would leave
	if d.Allowed {
		after -= v.Hit.Cost
	}
	verdict := map[bool]string{true: "allowed", false: "denied"}[d.Allowed]
	if !d.Allowed && h.shadow {
		verdict = "over the limit, and allowed: the limit is in shadow mode, counted but never denying"
	}
	name, left := named(h.policy, rule), remainingText(after)
	text := fmt.Sprintf("%s, key %q: a request now would be %s; %s left after it; full again in %v",
		name, key, verdict, left, d.ResetAfter.Round(time.Millisecond))
	held := int64(-1) // holders of a concurrency limit's slots; -1: not one
	if rule.Algorithm == floodgate.Concurrency {
		held = rule.Limit - d.Remaining
		text = fmt.Sprintf("%s, key %q: %d of %d slots held; a request now would be %s; %s left after it; all free in %v at the latest (when the newest lease's time to live runs out)",
			name, key, held, rule.Limit, verdict, left, d.ResetAfter.Round(time.Millisecond))
	}
	switch {
	case !d.Allowed && h.shadow:
		text += fmt.Sprintf("; within the limit again in %v", d.RetryAfter.Round(time.Millisecond))
	case !d.Allowed && held >= 0:
		text += fmt.Sprintf("; allowed again once a holder releases its lease, in %v at the latest", d.RetryAfter.Round(time.Millisecond))
	case !d.Allowed:
		text += fmt.Sprintf("; allowed again in %v", d.RetryAfter.Round(time.Millisecond))
	}
	remaining, over := clampRemaining(after)
	out := map[string]any{
		"policy": h.policy, "rule": rule.String(), "key": key, "allowed": d.Allowed || h.shadow, "over_limit": !d.Allowed, "shadow": h.shadow,
		"remaining": remaining, "over_by": over, "reset_after_ms": d.ResetAfter.Milliseconds(), "retry_after_ms": d.RetryAfter.Milliseconds(),
		"state_key": stateKey,
	}
	if held >= 0 {
		out["holders"] = held
	}
	return report(stdout, output, out, text+"; Redis key "+stateKey+"\n")
}

// clampRemaining returns a store's Remaining as the services report it,
// at least zero (rls's limit_remaining, httplimit's RateLimit r= and
// X-RateLimit-Remaining), and by how much the key is over its limit: what
// it owes, or what a lowered limit leaves it above the new one.
func clampRemaining(remaining int64) (shown, over int64) {
	return max(remaining, 0), max(-remaining, 0)
}

// remainingText writes Remaining as the services report it, with the
// excess of a key over its limit: "3", or "0 (7 over)".
func remainingText(remaining int64) string {
	shown, over := clampRemaining(remaining)
	if over > 0 {
		return fmt.Sprintf("%d (%d over)", shown, over)
	}
	return strconv.FormatInt(shown, 10)
}

// named describes rule r under policy, the name the services report it
// by: r itself when policy is its name (a -rule), else the policy with
// the rule, whose name is the store's (a configuration's limit:
// "login_ip (bank.route_login.remote_address-f0dd2eba5e37: 3/1m0s
// fixed-window)").
func named(policy string, r floodgate.Rule) string {
	if policy == r.Name {
		return r.String()
	}
	return policy + " (" + r.String() + ")"
}

// holders returns how many leases of a concurrency rule hold a key, from
// a peek's verdict and Remaining (which counts the peeked request when it
// is allowed).
func holders(rule floodgate.Rule, allowed bool, remaining int64) int64 {
	if allowed {
		remaining++
	}
	return rule.Limit - remaining
}

// targetHit is a hit that peek or reset reads, the policy the services
// report its limit under, and whether that limit is in shadow mode
// (counted, never denying), which only the service's configuration tells.
type targetHit struct {
	floodgate.Hit
	// policy is the limit's name in the service's answers, headers and
	// metrics: a configuration's rlmatch.Limit.Label (its name field, or
	// its descriptor path), or a -rule's name.
	policy string
	shadow bool
}

// target returns the hits the arguments name: one KEY under -rule, or
// the limits that apply to a descriptor of -domain in -config (by
// default the service's, env.ConfigDir), read as the service reads it.
func target(ruleSpec, configDir, domain string, args []string, env sharedEnv) ([]targetHit, error) {
	if configDir == "" && domain != "" {
		configDir = env.ConfigDir
	}
	if configDir == "" {
		if domain != "" {
			return nil, fmt.Errorf("%w: -domain needs -config (or CONFIG_DIR, RUNTIME_ROOT)", errUsage)
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("%w: want one KEY, got %d arguments\n%s", errUsage, len(args), usage)
		}
		rule, err := parseRule(ruleSpec)
		if err != nil {
			return nil, err
		}
		return []targetHit{{Hit: floodgate.Hit{Rule: rule, Key: args[0], Cost: 1}, policy: rule.Name}}, nil
	}
	if ruleSpec != "" || domain == "" || len(args) == 0 {
		return nil, fmt.Errorf("%w: -config takes -domain and KEY=VALUE entries, not -rule\n%s", errUsage, usage)
	}
	cfg, err := rlconfig.LoadDir(configDir, rlconfig.Options{MergeDomains: env.MergeDomains})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	entries := make([]rlmatch.Entry, len(args))
	for i, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: entry %q is not KEY=VALUE", errUsage, a)
		}
		entries[i] = rlmatch.Entry{Key: k, Value: v}
	}
	m := (*rlmatch.Config)(cfg).Match(domain, entries)
	var hits []targetHit
	for _, l := range m.Limits { // those of m.Hits
		if !l.Unlimited && !l.Blocked() {
			hits = append(hits, targetHit{floodgate.Hit{Rule: l.Rule, Key: m.Key, Cost: 1}, l.Label, l.ShadowMode || env.ShadowMode})
		}
	}
	if len(hits) == 0 {
		return nil, fmt.Errorf("%w: no counted limit of domain %q applies to %v (%v)", errUsage, domain, args, m.Outcome)
	}
	return hits, nil
}

func report(w io.Writer, output string, v map[string]any, text string) error {
	if output == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	_, err := io.WriteString(w, text)
	return err
}

// parseRule reads "name=NAME,limit=COUNT/WINDOW[,algorithm=ALG][,burst=N]".
func parseRule(spec string) (floodgate.Rule, error) {
	if spec == "" {
		return floodgate.Rule{}, fmt.Errorf("%w: -rule is required\n%s", errUsage, usage)
	}
	fields := map[string]string{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return floodgate.Rule{}, fmt.Errorf("%w: -rule %q: %q is not NAME=VALUE", errUsage, spec, part)
		}
		if _, dup := fields[k]; dup {
			return floodgate.Rule{}, fmt.Errorf("%w: -rule %q: %s given twice", errUsage, spec, k)
		}
		switch k {
		case "name", "limit", "algorithm", "burst":
		default:
			return floodgate.Rule{}, fmt.Errorf("%w: -rule %q: unknown field %q (want name, limit, algorithm, burst)", errUsage, spec, k)
		}
		fields[k] = v
	}
	if fields["name"] == "" || fields["limit"] == "" {
		return floodgate.Rule{}, fmt.Errorf("%w: -rule %q: name and limit are required", errUsage, spec)
	}
	alg := floodgate.SlidingWindow
	if a, ok := fields["algorithm"]; ok {
		if err := alg.UnmarshalText([]byte(a)); err != nil {
			return floodgate.Rule{}, err
		}
	}
	r, err := floodgate.ParseLimit(fields["name"], fields["limit"], alg)
	if err != nil {
		return floodgate.Rule{}, err
	}
	if b, ok := fields["burst"]; ok {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			return floodgate.Rule{}, fmt.Errorf("%w: -rule %q: burst %q is not a whole number", errUsage, spec, b)
		}
		r.Burst = n
		return r, r.Validate()
	}
	return r, nil
}
