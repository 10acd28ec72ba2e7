// Package rediskeys is redisstore's key layout (its package
// documentation's "Key layout"), defined once: the store names its keys
// with it, and the tools that read the store's keys (floodgate blocked,
// floodgate peek) find and parse them with it.
package rediskeys

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// DefaultPrefix starts every key of a store whose prefix is not set.
const DefaultPrefix = "fg:"

// ScriptLetters are the algorithms' letters in the scripts' arguments.
var ScriptLetters = [...]string{
	floodgate.SlidingWindow:        "s",
	floodgate.TokenBucket:          "t",
	floodgate.FixedWindow:          "f",
	floodgate.SlidingWindowCounter: "c",
	floodgate.Concurrency:          "s", // a lease is an entry of a ring
}

// Letters are the algorithms' letters in their state keys: the
// scripts' letters, but "w" for the sliding window's ring of 6-byte
// times. Earlier versions kept the sliding window under "s" (a sorted
// set) and "l" (a ring of 7-byte times). A replica of one version never
// reads another's keys: a GETRANGE of a sorted set would fail with
// WRONGTYPE, and a ring of another layout would be misread.
var Letters = [...]string{
	floodgate.SlidingWindow:        "w",
	floodgate.TokenBucket:          "t",
	floodgate.FixedWindow:          "f",
	floodgate.SlidingWindowCounter: "c",
	floodgate.Concurrency:          "h", // holders: a ring of leases' times
}

// Suffix is the end of a rule's state keys, after the tag: the
// algorithm's key letter and the window, "w:1m0s". The window is part of
// the state's identity (floodgate.Store), so that a rule whose window
// changes starts fresh instead of reading another window's state.
func Suffix(r floodgate.Rule) string {
	return Letters[r.Algorithm] + ":" + r.Window.String()
}

// Tag is the start of every key of (rule name, stored key), up to and
// including the ":" after the hash tag: "<prefix>{<name>:<stored key>}:".
// The prefix and rule name hold no braces and keyenc.Encode never returns
// one, so the tag is the key's only hash tag whatever the client sent.
func Tag(prefix, name, stored string) string {
	return prefix + "{" + name + ":" + stored + "}:"
}

// Tombstone is the key that marks the refund of a take as done, beside
// the state it credits: tag and suffix are the state key's ([Tag],
// [Suffix]), take the take's name (floodgate.Stamp.Take) in base 36:
// "<tag>r:<letter>:<window>:<take>", such as fg:{pix:acct-42}:r:w:1m0s:3b.
// [ParseStateKey] reports it not ok.
func Tombstone(tag, suffix, take string) string {
	return tag + "r:" + suffix + ":" + take
}

// StateKey returns the Redis key that holds the state of key under rule,
// for a store whose redisstore.Options.Prefix is prefix (empty means
// DefaultPrefix): "<prefix>{<rule name>:<encoded key>}:<letter>:<window>",
// such as fg:{pix:acct-42}:w:1m0s. The key is encoded as the store
// encodes it, so a long key or one with other bytes becomes its digest.
// An invalid rule (floodgate.Rule.Validate) is an error.
func StateKey(prefix string, rule floodgate.Rule, key string) (string, error) {
	if err := rule.Validate(); err != nil {
		return "", err
	}
	return Tag(cmp.Or(prefix, DefaultPrefix), rule.Name, keyenc.Encode(key)) + Suffix(rule), nil
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
	case rule.Window == 0 || int(rule.Algorithm) >= len(Letters):
		return prefix + globEscape("{"+rule.Name+":") + "*"
	}
	return prefix + globEscape("{"+rule.Name+":") + "*" + globEscape("}:"+Suffix(rule))
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
// (see redisstore.Store.PeekStored). ok is false for any other key: another
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
	if !ok || !IsStored(stored) {
		return floodgate.Rule{}, "", false
	}
	letter, window, ok := strings.Cut(suffix, ":")
	alg := slices.Index(Letters[:], letter)
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

// IsStored reports whether k is a key as the store keeps it: a key that
// keyenc.Encode keeps as it is, or a digest.
func IsStored(k string) bool {
	if strings.HasPrefix(k, "~") {
		sum, err := base64.RawURLEncoding.DecodeString(k[1:])
		return err == nil && len(sum) == 18 && "~"+base64.RawURLEncoding.EncodeToString(sum) == k
	}
	return keyenc.Encode(k) == k
}
