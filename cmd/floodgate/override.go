package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// The override subcommands edit the per-key limits that services read
// through package overrides: "customer 42 gets 1000/1m on api".
//
//	floodgate override set -rule api -limit 1000/1m [-algorithm ALG] [-burst N] [-ttl 24h] customer-42
//	floodgate override get -rule api customer-42
//	floodgate override rm  -rule api customer-42
//	floodgate override ls  [-rule api]
//	floodgate override set -config /etc/ratelimit -domain rl -limit 100/1m user=42
//	floodgate override ls  -config /etc/ratelimit -domain rl
//
// A service whose Limiter takes an overrides.Table applies a change
// within the Table's refresh interval (5s by default), with no restart.
// An override keeps the rule's name: a new limit keeps the key's count, a
// new window or algorithm starts the key afresh. -ttl makes it expire
// (counted from now on this machine's clock); without it, it lasts until
// rm. set also deletes the overrides that expired. With -config and
// -domain (the service's configuration), the arguments are a descriptor's
// entries, and the override is of the one limit that applies to it, by
// default with that limit's algorithm; -config defaults to the service's
// CONFIG_DIR (or RUNTIME_ROOT/...) when -domain is given. set and rm say
// how long at most a service's denial cache may still deny the key from
// a denial it cached before the change. ls lists every
// override, those without an expiry and those expired included, and the
// entries the services skip as invalid. With -config, an override of one
// of the domain's limits is named by the limit's policy, as peek and
// blocked name it (targetHit.policy), with the store's rule beside it;
// any other keeps its rule's name, which is what a Limiter reports it by
// (a library's live limits, rlconfig.Rules, keep the base rule's name).

const overrideUsage = `usage:
  floodgate override set -rule NAME -limit COUNT/WINDOW [-algorithm ALG] [-burst N] [-ttl DURATION] [-prefix P] [-o json] KEY
  floodgate override get|rm -rule NAME [-prefix P] [-o json] KEY
  floodgate override set|get|rm -config DIR -domain DOMAIN [set's flags] KEY=VALUE...
  floodgate override ls [-config DIR -domain DOMAIN] [-rule NAME] [-prefix P] [-o json]
With -config, a limit of the configuration is named by its policy, as the service reports it, with the store's rule beside it.
Redis is REDIS_URL, read as the service reads it; services apply a change within their refresh interval (5s by default).`

// overrideCmd runs "floodgate override ...": args follow "override".
func overrideCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: override needs set, get, rm or ls\n%s", errUsage, overrideUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "set", "get", "rm", "ls":
	default:
		return fmt.Errorf("%w: unknown override subcommand %q\n%s", errUsage, sub, overrideUsage)
	}
	fs := flag.NewFlagSet("override "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ruleName := fs.String("rule", "", "the rule's name, as the services name it")
	limit := fs.String("limit", "", "set: the key's limit, COUNT/WINDOW such as 1000/1m")
	algorithm := fs.String("algorithm", "sliding-window", "set: sliding-window (the default, up to a limit of 1000), token-bucket, fixed-window or sliding-window-counter")
	burst := fs.Int64("burst", 0, "set: the bucket capacity of a token-bucket override (0 means the limit)")
	ttl := fs.Duration("ttl", 0, "set: how long the override lasts (0: until rm)")
	configDir := fs.String("config", "", "a directory of envoyproxy/ratelimit YAML (with -domain): set|get|rm: the rule and key of a descriptor; ls: the limits' policies")
	domain := fs.String("domain", "", "the configuration's domain (with -config)")
	c := commonFlags(fs, "how long to wait for Redis")
	prefix, output, timeout := c.prefix, c.output, c.timeout
	if err := parseFlags(fs, args, overrideUsage); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	set := func(name string) bool {
		found := false
		fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
		return found
	}
	for _, name := range []string{"limit", "algorithm", "burst", "ttl"} {
		if sub != "set" && set(name) {
			return fmt.Errorf("%w: -%s is only for override set", errUsage, name)
		}
	}
	env, err := subcommandEnv(getenv)
	if err != nil {
		return err
	}
	*prefix = cmp.Or(*prefix, env.RedisPrefix)
	var key string
	var base *floodgate.Rule       // the key's own rule, when the configuration tells it
	var policy string              // the name the services report the rule by
	var policies map[string]string // ls -config: the limits' policies by their rules' names
	switch {
	case sub == "ls" && fs.NArg() != 0:
		return fmt.Errorf("%w: override ls takes no KEY, got %d arguments\n%s", errUsage, fs.NArg(), overrideUsage)
	case sub == "ls" && (*configDir != "" || *domain != ""):
		if policies, err = configPolicies(*configDir, *domain, env); err != nil {
			return err
		}
	case *configDir != "" || *domain != "":
		// A descriptor of the service's configuration: the rule and key
		// it is decided by, and by default that rule's algorithm.
		if *ruleName != "" {
			return fmt.Errorf("%w: -config takes -domain and KEY=VALUE entries, not -rule\n%s", errUsage, overrideUsage)
		}
		hits, err := target("", *configDir, *domain, fs.Args(), env)
		if err != nil {
			return err
		}
		if len(hits) != 1 {
			names := make([]string, len(hits))
			for i, h := range hits {
				names[i] = h.Rule.Name
			}
			return fmt.Errorf("%w: %d limits apply to %v (%s): give each with -rule NAME and its KEY", errUsage, len(hits), fs.Args(), strings.Join(names, ", "))
		}
		*ruleName, key, base, policy = hits[0].Rule.Name, hits[0].Key, &hits[0].Rule, hits[0].policy
		if !set("algorithm") {
			*algorithm = hits[0].Rule.Algorithm.String()
		}
	case sub != "ls" && fs.NArg() != 1:
		return fmt.Errorf("%w: want one KEY, got %d arguments\n%s", errUsage, fs.NArg(), overrideUsage)
	case sub != "ls":
		key = fs.Arg(0)
	}
	policy = cmp.Or(policy, *ruleName) // a -rule's policy is its name
	if *ruleName == "" && sub != "ls" {
		return fmt.Errorf("%w: -rule is required\n%s", errUsage, overrideUsage)
	}
	if *ruleName != "" {
		// The name alone, checked as a rule's name is.
		if err := (floodgate.Rule{Name: *ruleName, Limit: 1, Window: time.Second}).Validate(); err != nil {
			return err
		}
	}
	var entry overridetable.Entry
	if sub == "set" {
		var err error
		if entry, err = overrideEntry(*ruleName, *limit, *algorithm, *burst, *ttl, key); err != nil {
			return err
		}
		if !set("algorithm") && *configDir == "" && entry.Rule.Limit > bounds.DefaultLog {
			// The default, as the shorthands' (floodgate.PerMinute), and
			// refused above the same bound: the log would cost 6 bytes
			// in Redis per request of the limit, per key.
			return fmt.Errorf("%w: -limit %s without -algorithm: the default sliding-window log keeps every request (6 bytes each in Redis: %d KB per key); "+
				"above %d, give -algorithm token-bucket or sliding-window-counter (a few dozen bytes a key), or -algorithm sliding-window to insist. "+
				"A rule's state belongs to its algorithm: give the rule's own to keep the key's count",
				errUsage, *limit, entry.Rule.Limit*6/1000, bounds.DefaultLog)
		}
	}
	table, err := overridetable.New(overridetable.Options{URL: env.RedisURL, Prefix: *prefix, DialTimeout: *timeout})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer table.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	out := overrideOutput{w: stdout, json: *output == "json"}
	switch sub {
	case "set":
		if err := table.Set(ctx, entry); err != nil {
			return err
		}
		pruned, err := table.Prune(ctx, time.Now())
		if err != nil {
			return err
		}
		// A service answers a denial cached under the key's old rule
		// until it reads the override (a cached denial is of one rule),
		// and one cached under the new rule, had the key that rule
		// before, until its Retry-After runs out.
		wait := max(overridetable.DefaultRefresh, longestWait(entry.Rule))
		text := fmt.Sprintf("set %s; services apply it within their refresh interval (5s by default)\n%s\n",
			entryText(policy, entry), cachedDenialNote("this change", wait))
		if pruned > 0 {
			text += fmt.Sprintf("deleted %d expired override(s)\n", pruned)
		}
		return out.report(map[string]any{"set": entryJSON(policy, entry, time.Now()), "pruned": pruned, "cached_denial_max_ms": wait.Milliseconds()}, text)
	case "get":
		e, ok, err := table.Get(ctx, *ruleName, key)
		if err != nil {
			return err
		}
		if !ok {
			return out.report(map[string]any{"policy": policy, "rule": *ruleName, "key": key, "found": false},
				fmt.Sprintf("no override of key %q under %s: the rule's own limit applies\n", key, ruleOf(policy, *ruleName)))
		}
		now := time.Now()
		text := entryText(policy, e) + "\n"
		if e.ExpiredAt(now) {
			text = entryText(policy, e) + " (expired: the rule's own limit applies)\n"
		}
		v := entryJSON(policy, e, now)
		v["found"] = true
		return out.report(v, text)
	case "rm":
		ok, err := table.Delete(ctx, *ruleName, key)
		if err != nil {
			return err
		}
		text := fmt.Sprintf("no override of key %q under %s\n", key, ruleOf(policy, *ruleName))
		v := map[string]any{"policy": policy, "rule": *ruleName, "key": key, "removed": ok}
		if ok {
			// The key's own rule applies again, and with it a denial a
			// service cached under that rule before the override, until
			// its Retry-After runs out: at most the rule's longest wait,
			// which only the configuration tells.
			text = fmt.Sprintf("removed the override of key %q under %s; services apply the rule's own limit within their refresh interval (5s by default)\n", key, ruleOf(policy, *ruleName))
			if base != nil {
				wait := max(overridetable.DefaultRefresh, longestWait(*base))
				v["cached_denial_max_ms"] = wait.Milliseconds()
				text += cachedDenialNote("the override (under the rule's own limit)", wait) + "\n"
			} else {
				v["cached_denial_max_ms"] = nil // -config tells it
				text += cachedDenialNote("the override (under the rule's own limit)", 0) + "\n"
			}
		}
		return out.report(v, text)
	default:
		l, err := table.List(ctx)
		if err != nil {
			return err
		}
		return listOverrides(out, l, *ruleName, policies, time.Now())
	}
}

// overrideEntry builds the entry of "override set" from its flags.
func overrideEntry(rule, limit, algorithm string, burst int64, ttl time.Duration, key string) (overridetable.Entry, error) {
	if limit == "" {
		return overridetable.Entry{}, fmt.Errorf("%w: override set needs -limit COUNT/WINDOW, such as 1000/1m", errUsage)
	}
	var alg floodgate.Algorithm
	if err := alg.UnmarshalText([]byte(algorithm)); err != nil {
		return overridetable.Entry{}, err
	}
	r, err := floodgate.ParseLimit(rule, limit, alg)
	if err != nil {
		return overridetable.Entry{}, err
	}
	if burst != 0 {
		r.Burst = burst
		if err := r.Validate(); err != nil {
			return overridetable.Entry{}, err
		}
	}
	if ttl < 0 {
		return overridetable.Entry{}, fmt.Errorf("%w: -ttl %v is negative", errUsage, ttl)
	}
	e := overridetable.Entry{Rule: r, Key: key}
	if ttl > 0 {
		e.Expires = time.Now().Add(ttl).UTC().Truncate(time.Millisecond)
	}
	if err := e.Validate(); err != nil {
		return overridetable.Entry{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	return e, nil
}

// listOverrides prints the overrides of l (those of rule, if not empty),
// then the invalid entries. With policies (ls -config: the policies of
// the configuration's limits by their rules' names), each is named by its
// rule's policy, if it has one, with the rule beside it in a RULE column.
func listOverrides(out overrideOutput, l *overridetable.Listing, rule string, policies map[string]string, now time.Time) error {
	policy := func(e overridetable.Entry) string { return cmp.Or(policies[e.Rule.Name], e.Rule.Name) }
	var entries []overridetable.Entry
	for _, e := range l.Entries {
		if rule == "" || e.Rule.Name == rule {
			entries = append(entries, e)
		}
	}
	if policies != nil {
		slices.SortStableFunc(entries, func(a, b overridetable.Entry) int { return cmp.Compare(policy(a), policy(b)) })
	}
	invalid := l.Invalid
	if out.json {
		enc := json.NewEncoder(out.w)
		for _, e := range entries {
			if err := enc.Encode(entryJSON(policy(e), e, now)); err != nil {
				return err
			}
		}
		for _, b := range invalid {
			if err := enc.Encode(map[string]any{"invalid": true, "field": b.Field, "value": b.Value, "error": b.Err.Error()}); err != nil {
				return err
			}
		}
		return nil
	}
	// A RULE column when a policy is not its rule's name, as blocked's.
	ruled := slices.ContainsFunc(entries, func(e overridetable.Entry) bool { return policy(e) != e.Rule.Name })
	tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
	header := "RULE\tKEY\tLIMIT\tALGORITHM\tEXPIRES"
	if policies != nil {
		header = "POLICY\tKEY\tLIMIT\tALGORITHM\tEXPIRES"
	}
	if ruled {
		header += "\tRULE"
	}
	fmt.Fprintln(tw, header)
	for _, e := range entries {
		lim := fmt.Sprintf("%d/%v", e.Rule.Limit, e.Rule.Window)
		alg := e.Rule.Algorithm.String()
		if e.Rule.Burst > 0 {
			alg += ", burst " + strconv.FormatInt(e.Rule.Burst, 10)
		}
		expires := "never"
		switch {
		case e.ExpiredAt(now):
			expires = "expired " + e.Expires.UTC().Format(time.RFC3339)
		case !e.Expires.IsZero():
			expires = e.Expires.UTC().Format(time.RFC3339) + " (in " + e.Expires.Sub(now).Round(time.Second).String() + ")"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", policy(e), strconv.Quote(e.Key), lim, alg, expires)
		if ruled {
			line += "\t" + e.Rule.Name
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out.w, "%d override(s)\n", len(entries))
	if len(invalid) > 0 {
		fmt.Fprintf(out.w, "%d invalid entr(ies), skipped by the services (fix them with set, or rm them):\n", len(invalid))
		for _, b := range invalid {
			fmt.Fprintf(out.w, "  %q = %q: %v\n", b.Field, b.Value, b.Err)
		}
	}
	return nil
}

// configPolicies returns the policies of the counted limits of domain in
// configDir (by default the service's, env.ConfigDir), read as the
// service reads it, by their rules' names: each limit's
// rlmatch.Limit.Label, which peek and blocked name it by too.
func configPolicies(configDir, domain string, env sharedEnv) (map[string]string, error) {
	configDir = cmp.Or(configDir, env.ConfigDir)
	switch {
	case configDir == "":
		return nil, fmt.Errorf("%w: -domain needs -config (or CONFIG_DIR, RUNTIME_ROOT)", errUsage)
	case domain == "":
		return nil, fmt.Errorf("%w: override ls -config takes -domain\n%s", errUsage, overrideUsage)
	}
	cfg, err := rlconfig.LoadDir(configDir, rlconfig.Options{MergeDomains: env.MergeDomains})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	policies := map[string]string{}
	for _, l := range (*rlmatch.Config)(cfg).Limits() {
		// The limits that override set -config can name (target).
		if !l.Unlimited && !l.Blocked() && domainOf(cfg.Domains(), l.Path) == domain {
			policies[l.Rule.Name] = l.Label
		}
	}
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: domain %q has no counted limit in %s (domains: %q)", errUsage, domain, configDir, cfg.Domains())
	}
	return policies, nil
}

// ruleOf names the rule called name under policy, the name the services
// report it by: "rule api" when they are one (a -rule), else
// "statement_per_account (rule bank.route_statement.account-4a87cb95db4d)".
func ruleOf(policy, name string) string {
	if policy == name {
		return "rule " + name
	}
	return policy + " (rule " + name + ")"
}

// entryText is e as the text output writes it, its rule named under
// policy as peek names it (named).
func entryText(policy string, e overridetable.Entry) string {
	return strings.Replace(e.String(), e.Rule.String(), named(policy, e.Rule), 1)
}

// entryJSON is an entry as -o json prints it, under policy, the name the
// services report its rule by.
func entryJSON(policy string, e overridetable.Entry, now time.Time) map[string]any {
	v := map[string]any{
		"policy": policy, "rule": e.Rule.Name, "key": e.Key, "limit": e.Rule.Limit, "window": e.Rule.Window.String(),
		"window_ms": e.Rule.Window.Milliseconds(), "algorithm": e.Rule.Algorithm.String(), "burst": e.Rule.Burst,
		"expires": nil, "expired": e.ExpiredAt(now),
	}
	if !e.Expires.IsZero() {
		v["expires"] = e.Expires.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// overrideOutput writes text, or one JSON object per line.
type overrideOutput struct {
	w    io.Writer
	json bool
}

func (o overrideOutput) report(v map[string]any, text string) error {
	if o.json {
		return json.NewEncoder(o.w).Encode(v)
	}
	_, err := io.WriteString(o.w, text)
	return err
}

// withOverrides returns hits with the overrides in force in Redis
// applied, as the services' Limiters apply them, so that peek and reset
// read and clear the state a request would use; each one applied is
// noted on stderr. An entry the services skip as invalid is skipped here
// too.
func withOverrides(ctx context.Context, url, prefix string, timeout time.Duration, hits []targetHit, stderr io.Writer) ([]targetHit, error) {
	table, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix, DialTimeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	defer table.Close()
	now := time.Now()
	out := make([]targetHit, len(hits))
	for i, h := range hits {
		out[i] = h
		e, ok, err := table.Get(ctx, h.Rule.Name, h.Key)
		switch {
		case errors.Is(err, overridetable.ErrInvalidEntry):
			fmt.Fprintf(stderr, "floodgate: the override of key %q under rule %s is invalid, and skipped as the services skip it: %v\n", h.Key, h.Rule.Name, err)
		case err != nil:
			return nil, err
		case ok && !e.ExpiredAt(now) && e.Rule != h.Rule:
			fmt.Fprintf(stderr, "floodgate: key %q has an override under rule %s: %v (floodgate override get)\n", h.Key, h.Rule.Name, e.Rule)
			out[i].Rule = e.Rule
		}
	}
	return out, nil
}
