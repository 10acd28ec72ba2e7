// Package bounds holds the limits every part of floodgate enforces on
// rules, hits and keys, once. The public documentation states their
// values where a user meets them: floodgate.Rule, floodgate.Hit and
// floodgate.Rule.Validate.
package bounds

import "time"

const (
	// NameLen is the longest policy name of a rule.
	NameLen = 64
	// KeyLen is the longest key of a hit: 1 MiB. Stores keep keys longer
	// than a few dozen bytes as a fixed-size digest.
	KeyLen = 1 << 20
	// Limit is the highest Limit, and Burst, of any rule: 2^51, where
	// every store's arithmetic (Redis's Lua counts in doubles) stays
	// exact.
	Limit = 1 << 51
	// Window is the longest window of a rule: ten years, which keeps
	// every store's arithmetic in microseconds exact (below 2^51).
	Window = 10 * 365 * 24 * time.Hour
	// SlidingLimit is the highest Limit of a sliding-window log, and
	// SlidingCost the highest cost of one of its hits: the log keeps one
	// entry per unit of cost admitted (6 bytes in Redis), so one hit on a
	// new key makes Redis hold at most 728 bytes for its window, against
	// 136 for a hit of cost 1 (a cap of 1,000 let one request hold
	// 6,232 bytes, 46 times as much). take.lua's LOGDEBT copies it.
	SlidingLimit = 1_000_000
	SlidingCost  = 100
	// DefaultLog is the highest limit for which a default picks the exact
	// sliding-window log (httplimit.PerIP, the CLI's override set): its
	// memory grows with the limit, 6 bytes a request in Redis, so a
	// larger quota gets an O(1) algorithm unless one is named.
	DefaultLog = 1000
)

// MaxCost is the highest cost of one hit (floodgate.Hit.Cost): its rule's
// capacity, or Limit for an Overdraw hit; at most SlidingCost when the
// rule keeps a log (logged: a sliding window or a concurrency limit),
// which records a time per unit of cost. The Limiter validates hits with
// it, the stores check their callers' with it, and package enforce denies
// what is above it (enforce.DenyOversize).
func MaxCost(capacity int64, logged, overdraw bool) int64 {
	if overdraw {
		capacity = Limit
	}
	if logged {
		capacity = min(capacity, SlidingCost)
	}
	return capacity
}

// GateNameLen is the longest name of an enforce gate (an RLS domain's,
// once made one by NameByte's rule plus + and /).
const GateNameLen = 128

// NameByte reports whether a rule's name may hold byte c: A-Z a-z 0-9 _ .
// -, so that a name never brings a brace (a Redis Cluster hash tag) or a
// key separator into a store key, and is an sf-string that needs no
// escaping in a header. (A bitmap test: every decision validates its rule.)
func NameByte(c byte) bool {
	m := uint64(nameBytesLow)
	if c >= 64 {
		m = nameBytesHigh
	}
	return c < 128 && m>>(c&63)&1 != 0
}

// nameBytesLow and nameBytesHigh are the bytes NameByte allows, bit c and
// bit c-64 for a byte c below 64 and below 128.
const (
	nameBytesLow  = 1<<'-' | 1<<'.' | (1<<10-1)<<'0'
	nameBytesHigh = (1<<26-1)<<('A'-64) | 1<<('_'-64) | (1<<26-1)<<('a'-64)
)

// BadNameByte returns the index of the first byte of name that a rule's
// name may not hold (NameByte), or -1.
func BadNameByte(name string) int {
	for i := 0; i < len(name); i++ {
		if !NameByte(name[i]) {
			return i
		}
	}
	return -1
}

// GateNameByte reports whether a gate's name may hold byte c: a rule
// name's bytes (NameByte), + and /.
func GateNameByte(c byte) bool { return NameByte(c) || c == '+' || c == '/' }

// GateName reports whether name may name a gate: 1 to GateNameLen bytes,
// each a GateNameByte.
func GateName(name string) bool {
	if name == "" || len(name) > GateNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !GateNameByte(name[i]) {
			return false
		}
	}
	return true
}
