package rlmatch

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Unit is the time unit of an envoyproxy/ratelimit limit. Its values are
// those of the RLS v3 RateLimitUnit enum, so a service may convert it
// with a plain conversion.
type Unit int32

// The units. Month is 30 days and Year 365 days, as envoyproxy/ratelimit
// counts them. UnitUnknown is the unit of a limit whose window (the
// window extension) is not exactly one of the others.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitWindows = map[Unit]time.Duration{
	Second: time.Second,
	Minute: time.Minute,
	Hour:   time.Hour,
	Day:    24 * time.Hour,
	Week:   7 * 24 * time.Hour,
	Month:  30 * 24 * time.Hour,
	Year:   365 * 24 * time.Hour,
}

var unitNames = map[Unit]string{
	UnitUnknown: "unknown",
	Second:      "second",
	Minute:      "minute",
	Hour:        "hour",
	Day:         "day",
	Week:        "week",
	Month:       "month",
	Year:        "year",
}

// String returns the unit's name in lower case, as a configuration
// writes it ("minute").
func (u Unit) String() string {
	if s, ok := unitNames[u]; ok {
		return s
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Window returns the unit's length, or zero for UnitUnknown.
func (u Unit) Window() time.Duration { return unitWindows[u] }

// parseUnit reads a unit name in any case, as envoyproxy/ratelimit does.
func parseUnit(s string) (Unit, bool) {
	for u, name := range unitNames {
		if u != UnitUnknown && strings.EqualFold(s, name) {
			return u, true
		}
	}
	return UnitUnknown, false
}

// unitOf returns the unit whose length is exactly w, or UnitUnknown.
func unitOf(w time.Duration) Unit {
	for u, uw := range unitWindows {
		if uw == w {
			return u
		}
	}
	return UnitUnknown
}

// parseAlgorithm reads the configuration's algorithm names, which spell
// floodgate's names with underscores ("token_bucket").
func parseAlgorithm(s string) (floodgate.Algorithm, error) {
	var a floodgate.Algorithm
	err := a.UnmarshalText([]byte(strings.ReplaceAll(s, "_", "-")))
	if err != nil || a == floodgate.Concurrency { // Envoy's rate-limit API never ends a request: no lease is released
		return 0, fmt.Errorf("unknown algorithm %q (want fixed_window, sliding_window, sliding_window_counter or token_bucket)", s)
	}
	return a, nil
}

// Limit is one configured limit: a rate_limit block, or one item of a
// rate_limits list. It belongs to its [Config] and is shared by every
// [Match] that returns it: treat it as read-only.
type Limit struct {
	// Rule is the validated floodgate rule that counts this limit. Its
	// Name is derived from the domain and the descriptor path, so it is
	// the same for the same node across reloads and differs between
	// nodes. The Rule is the zero Rule for an Unlimited limit. For a
	// Blocked limit (requests_per_unit: 0) it has Limit 0, which no
	// floodgate store accepts: such a limit denies without counting.
	Rule floodgate.Rule
	// AlgorithmSet reports whether the file names the algorithm, at the
	// limit's level or above; false means envoyproxy/ratelimit's fixed
	// window, by default.
	AlgorithmSet bool
	// Name is the rate limit's name field as written; often empty. It is
	// what replaces refers to and what current_limit reports.
	Name string
	// Label names the limit for people and metrics: Name, or else Path
	// (with "#2", "#3"... for the second and later items of a
	// rate_limits list).
	Label string
	// Path is the descriptor path in envoyproxy/ratelimit's form:
	// the domain and each level's key (or key_value), joined by dots
	// ("messaging.message_type_marketing.to_number").
	Path string
	// File is the file the limit was read from.
	File string
	// RequestsPerUnit is the number of requests allowed per Unit (or per
	// window); 0 blocks every request.
	RequestsPerUnit int64
	// Unit is the limit's unit; UnitUnknown when a window extension is
	// not exactly one unit long. Rule.Window holds the window in every
	// case.
	Unit Unit
	// Unlimited marks a limit that never denies and is never counted.
	Unlimited bool
	// ShadowMode marks a limit that is counted and reported but never
	// denies.
	ShadowMode bool
	// QuotaMode is envoyproxy/ratelimit's quota_mode flag, carried as
	// written.
	QuotaMode bool
	// Replaces lists the names of the limits this one replaces when both
	// apply to one request.
	Replaces []string
}

// Blocked reports whether the limit admits nothing (requests_per_unit 0,
// envoyproxy/ratelimit's way to deny a value outright).
func (l *Limit) Blocked() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// String describes the limit for people and logs:
// "messaging.to_number: 100/day fixed-window".
func (l *Limit) String() string {
	var b strings.Builder
	b.WriteString(l.Label)
	b.WriteString(": ")
	switch {
	case l.Unlimited:
		b.WriteString("unlimited")
	default:
		b.WriteString(strconv.FormatInt(l.RequestsPerUnit, 10))
		b.WriteString("/")
		if l.Unit != UnitUnknown {
			b.WriteString(l.Unit.String())
		} else {
			b.WriteString(l.Rule.Window.String())
		}
		b.WriteString(" ")
		b.WriteString(l.Rule.Algorithm.String())
		if l.Rule.Burst > 0 {
			b.WriteString(", burst ")
			b.WriteString(strconv.FormatInt(l.Rule.Burst, 10))
		}
	}
	if l.Blocked() {
		b.WriteString(", blocks every request")
	}
	if l.ShadowMode {
		b.WriteString(", shadow")
	}
	return b.String()
}
