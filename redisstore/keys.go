package redisstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// The key layout (the package documentation's "Key layout"), defined
// here once: the store names its keys with tag and stateSuffix, and tools
// that read the store's keys (floodgate blocked) use StateKey,
// StatePattern, ParseStateKey and Store.PeekStored.

// suffixes are the algorithms' letters in the scripts' arguments.
var suffixes = [...]string{
	floodgate.SlidingWindow:        "s",
	floodgate.TokenBucket:          "t",
	floodgate.FixedWindow:          "f",
	floodgate.SlidingWindowCounter: "c",
	floodgate.Concurrency:          "s", // a lease is an entry of a ring
}

// keyLetters are the algorithms' letters in their state keys: the
// scripts' letters, but "w" for the sliding window's ring of 6-byte
// times. Earlier versions kept the sliding window under "s" (a sorted
// set) and "l" (a ring of 7-byte times). A replica of one version never
// reads another's keys: a GETRANGE of a sorted set would fail with
// WRONGTYPE, and a ring of another layout would be misread.
var keyLetters = [...]string{
	floodgate.SlidingWindow:        "w",
	floodgate.TokenBucket:          "t",
	floodgate.FixedWindow:          "f",
	floodgate.SlidingWindowCounter: "c",
	floodgate.Concurrency:          "h", // holders: a ring of leases' times
}

// stateSuffix is the end of a rule's state keys, after the tag: the
// algorithm's key letter and the window, "w:1m0s". The window is part of
// the state's identity (floodgate.Store), so that a rule whose window
// changes starts fresh instead of reading another window's state.
func stateSuffix(r floodgate.Rule) string {
	return keyLetters[r.Algorithm] + ":" + r.Window.String()
}

// tag returns the start of every key of (rule name, key), up to and
// including the ":" after the hash tag: "<prefix>{<name>:<encoded key>}:".
// The prefix and rule name hold no braces and keyenc.Encode never returns
// one, so the tag is the key's only hash tag whatever the client sent.
func (s *Store) tag(name, key string) string {
	return storedTag(s.prefix, name, keyenc.Encode(key))
}

// storedTag is tag for a key as the store keeps it (encoded).
func storedTag(prefix, name, stored string) string {
	return prefix + "{" + name + ":" + stored + "}:"
}

// StateKey returns the Redis key that holds the state of key under rule,
// for a store whose [Options.Prefix] is prefix (empty means
// DefaultPrefix): "<prefix>{<rule name>:<encoded key>}:<letter>:<window>",
// such as fg:{pix:acct-42}:w:1m0s. The key is encoded as the store
// encodes it, so a long key or one with other bytes becomes its digest.
// An invalid rule (floodgate.Rule.Validate) is an error.
func StateKey(prefix string, rule floodgate.Rule, key string) (string, error) {
	if err := rule.Validate(); err != nil {
		return "", err
	}
	return storedTag(cmp.Or(prefix, DefaultPrefix), rule.Name, keyenc.Encode(key)) + stateSuffix(rule), nil
}

// StatePattern returns a pattern for SCAN's MATCH that finds the state
// keys of rule under prefix (empty means DefaultPrefix): those of its
// name, algorithm and window; of its name with any algorithm and window
// when rule.Window is zero; of every rule when rule.Name is empty too.
// It may match other keys of the store (refund tombstones): keep those
// for which [ParseStateKey] reports ok.
func StatePattern(prefix string, rule floodgate.Rule) string {
	prefix = globEscape(cmp.Or(prefix, DefaultPrefix))
	switch {
	case rule.Name == "":
		return prefix + "{*"
	case rule.Window == 0 || int(rule.Algorithm) >= len(keyLetters):
		return prefix + globEscape("{"+rule.Name+":") + "*"
	}
	return prefix + globEscape("{"+rule.Name+":") + "*" + globEscape("}:"+stateSuffix(rule))
}

// globEscape escapes the bytes that a MATCH pattern treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseStateKey reads a state key under prefix (empty means
// DefaultPrefix), as [StateKey] writes it and SCAN finds it. It returns
// the state's rule, of which only Name, Algorithm and Window are set (the
// key holds nothing else of it: a state belongs to those three), and the
// client key as the store keeps it: the key itself, or "~" and its digest
// (see [Store.PeekStored]). ok is false for any other key: another
// prefix's, a refund tombstone, an earlier version's layout.
func ParseStateKey(prefix, key string) (rule floodgate.Rule, stored string, ok bool) {
	rest, ok := strings.CutPrefix(key, cmp.Or(prefix, DefaultPrefix)+"{")
	if !ok {
		return floodgate.Rule{}, "", false
	}
	name, rest, ok := strings.Cut(rest, ":") // a rule's name holds no ":"
	if !ok {
		return floodgate.Rule{}, "", false
	}
	stored, suffix, ok := strings.Cut(rest, "}:") // a stored key holds no brace
	if !ok || !isStored(stored) {
		return floodgate.Rule{}, "", false
	}
	letter, window, ok := strings.Cut(suffix, ":")
	alg := slices.Index(keyLetters[:], letter)
	if !ok || alg < 0 {
		return floodgate.Rule{}, "", false
	}
	w, err := time.ParseDuration(window)
	if err != nil || w <= 0 || w.String() != window {
		return floodgate.Rule{}, "", false
	}
	rule = floodgate.Rule{Name: name, Algorithm: floodgate.Algorithm(alg), Window: w}
	if (floodgate.Rule{Name: name, Limit: 1, Window: w}).Validate() != nil {
		return floodgate.Rule{}, "", false
	}
	return rule, stored, true
}

// isStored reports whether k is a key as the store keeps it: a key that
// keyenc.Encode keeps as it is, or a digest.
func isStored(k string) bool {
	if strings.HasPrefix(k, "~") {
		sum, err := base64.RawURLEncoding.DecodeString(k[1:])
		return err == nil && len(sum) == 18 && "~"+base64.RawURLEncoding.EncodeToString(sum) == k
	}
	return keyenc.Encode(k) == k
}

// PeekStored is [Store.Peek] for keys as the store keeps them: each hit's
// Key is one that [ParseStateKey] returned (the client's key, or the
// digest that stands for it), and is not encoded again. It lets a tool
// that lists the store's keys peek at a hashed key, whose client key it
// cannot know, under the rule the service would judge it by. Like Peek it
// writes nothing; on a Cluster it makes one call per slot, concurrently.
// A Key that no client key encodes to is an error wrapping
// floodgate.ErrInvalidHit.
func (s *Store) PeekStored(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	for i, h := range hits {
		if !isStored(h.Key) {
			return nil, fmt.Errorf("redisstore: peek stored: hit %d: %w: %q is not a key as the store keeps it", i, floodgate.ErrInvalidHit, h.Key)
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if !s.conn.Cluster() || len(hits) < 2 {
		res, err := s.peekStored(ctx, hits)
		if !errors.Is(err, ErrCrossSlot) { // see Take
			return res, err
		}
	}
	// One call per slot of the keys' hash tags, concurrently.
	bySlot := map[uint16][]int{}
	for i, h := range hits {
		slot := keySlot(storedTag(s.prefix, h.Rule.Name, h.Key))
		bySlot[slot] = append(bySlot[slot], i)
	}
	out := make([]floodgate.Result, len(hits))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, idx := range bySlot {
		wg.Go(func() {
			g := make([]floodgate.Hit, len(idx))
			for j, i := range idx {
				g[j] = hits[i]
			}
			res, err := s.peekStored(ctx, g)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			for j, i := range idx {
				out[i] = res[j]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// peekStored is peek (script.go) for stored keys of one slot: the same
// script and arguments, with each state key named by the hit's stored key
// where appendGroup names it by the key's encoding.
func (s *Store) peekStored(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	keys, args, err := s.appendGroup(make([]string, 0, len(hits)), []string{"0"}, "peek", group{hits: hits})
	if err != nil {
		return nil, err
	}
	for i, h := range hits {
		keys[i] = storedTag(s.prefix, h.Rule.Name, h.Key) + stateSuffix(h.Rule)
	}
	v, err := s.eval(ctx, peekScript, keys, args)
	if err != nil {
		return nil, err
	}
	res, err := parseValues(v, []int{len(hits)}, false)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return res[0], nil
}
