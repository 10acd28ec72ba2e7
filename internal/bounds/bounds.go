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
