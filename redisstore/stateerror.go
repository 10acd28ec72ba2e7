package redisstore

import (
	"errors"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// StateError reports a script call that Redis refused because of what it
// holds under one of the call's keys: a value the store did not write
// ("malformed state"), a value of another type (WRONGTYPE), or state the
// script cannot use (a sliding window's entry older than its ring holds).
// The check was not decided; checks of other keys are decided as usual,
// so a circuit breaker in front of the store does not count it. It wraps
// [floodgate.ErrCorruptState], and so [floodgate.ErrStoreUnavailable].
//
// Its Error names the rule, never the client's key nor the store's
// prefix: the text may reach clients. Key is there for an operator who
// repairs the state (deleting the key forgets its count, as Reset does).
type StateError struct {
	// Rule is the name of the rule whose state Redis refused, or "" when
	// Redis did not say which key of a call of several rules it was (a
	// WRONGTYPE reply names none).
	Rule string
	// Key is the Redis key whose value Redis refused, or "" when Redis did
	// not say which it was. It holds the client's key as the store wrote
	// it (in the clear unless it was long or unusual, see the package
	// documentation), so it belongs where client keys may go, not in
	// every log line.
	Key string

	detail string // what follows "corrupt state: " in Error
}

// Error describes the problem without the key: "redisstore: store
// unavailable: corrupt state: rule "login" (sliding window): malformed
// state".
func (e *StateError) Error() string {
	return "redisstore: " + floodgate.ErrCorruptState.Error() + ": " + e.detail
}

// Unwrap returns [floodgate.ErrCorruptState].
func (e *StateError) Unwrap() error { return floodgate.ErrCorruptState }

// maxReason bounds the part of a script's error that a StateError keeps.
const maxReason = 200

// stateError returns the *StateError of err, an error of a script call on
// keys, if it is Redis's refusal of what one of those keys holds: a
// WRONGTYPE reply, or a script error that names one of the keys or
// reports a malformed state (the scripts raise such errors only about a
// key's data). Anything else, whatever its text, says nothing about one
// key and is left alone. Of the reply it keeps only the reason the script
// gave after the key, with any key of the call cut out.
func (s *Store) stateError(err error, keys []string) *StateError {
	if errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, floodgate.ErrClosed) ||
		errors.Is(err, errCrossSlot) {
		return nil // the store's own errors: a connection, a bug, a closed store
	}
	msg := err.Error()
	wrongType := strings.HasPrefix(msg, "WRONGTYPE")
	e := &StateError{}
	first := len(msg)
	for _, k := range keys { // the key the reply names first
		if i := strings.Index(msg, k); i >= 0 && i < first {
			e.Key, first = k, i
		}
	}
	if !wrongType && e.Key == "" && !strings.Contains(msg, "malformed state") {
		return nil
	}
	reason := "malformed state"
	switch {
	case wrongType:
		reason = "the key holds a value of another type"
	case e.Key != "":
		// "... redisstore: token bucket <key>: <reason> script: <sha>, on
		// @user_script:522."
		_, after, _ := strings.Cut(msg, e.Key)
		after = strings.TrimPrefix(after, ":")
		if i := strings.Index(after, " script: "); i >= 0 {
			after = after[:i]
		}
		for _, k := range keys {
			after = strings.ReplaceAll(after, k, "<key>")
		}
		if after = strings.TrimSpace(after); after != "" {
			reason = after[:min(len(after), maxReason)]
		}
	}
	if e.Key == "" && len(keys) == 1 {
		e.Key = keys[0]
	}
	var b strings.Builder
	if e.Key != "" {
		e.Rule = s.ruleOf(e.Key)
	} else {
		// Not said which: the rule, if the call has one.
		for i, k := range keys {
			if r := s.ruleOf(k); i == 0 {
				e.Rule = r
			} else if r != e.Rule {
				e.Rule = ""
				break
			}
		}
	}
	if e.Rule != "" {
		b.WriteString(`rule "` + e.Rule + `"`)
	} else {
		b.WriteString("a key of the check")
	}
	if alg := algorithmOf(e.Key); alg != "" {
		b.WriteString(" (" + alg + ")")
	}
	b.WriteString(": " + reason)
	e.detail = b.String()
	return e
}

// ruleOf returns the rule name in a key of the store,
// "<prefix>{<rule>:<key>}:...", or "".
func (s *Store) ruleOf(key string) string {
	rest, ok := strings.CutPrefix(key, s.prefix+"{")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return name
}

// algorithmOf returns the algorithm of a state key, "...}:w:1m0s", or "".
func algorithmOf(key string) string {
	i := strings.LastIndex(key, "}:")
	if i < 0 {
		return ""
	}
	letter, _, _ := strings.Cut(key[i+2:], ":")
	for alg, l := range keyLetters {
		if l == letter {
			return floodgate.Algorithm(alg).String()
		}
	}
	return ""
}
