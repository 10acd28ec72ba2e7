// Package overrides gives some keys of a rule a limit of their own, held
// in Redis and changed from a shell without a redeploy: "customer 42 gets
// 1000/1m on api", a plan tier, a temporary raise with an expiry.
//
//	table, err := overrides.New(ctx, overrides.Options{URL: redisURL, Registerer: reg, Logger: logger})
//	defer table.Close()
//	limiter, err := floodgate.New(store, floodgate.Options{Overrides: table})
//
// and, from a shell, against the same Redis:
//
//	floodgate override set -rule api -limit 1000/1m customer-42
//	floodgate override set -rule api -limit 5000/1m -ttl 24h customer-7
//	floodgate override ls
//	floodgate override rm -rule api customer-42
//
// An override replaces the limit, window, algorithm and burst of the rule
// of its name for one key, as the application spells the key. It keeps
// the rule's name, so what it does to the key's count follows the store's
// rule (floodgate.Store): a new limit or burst keeps the count so far and
// applies to it at once; a new window or algorithm starts the key from a
// fresh state (and the base rule's state, as it was left, is used again
// once the override is gone). floodgate.Overrides states the Limiter's
// side.
//
// # When a change is in force
//
// A [Table] keeps the overrides in memory and refreshes them every
// Options.Refresh: a change made with the command (or [Table.Set] and
// [Table.Delete]) is in force in every replica within that time, plus
// one Redis round trip. A decision never waits on Redis for an override:
// the lookup is a map lookup in the process (BENCHMARKS.md has the cost),
// so overrides add no round trip to the hot path. An override's expiry is
// checked at each lookup, on the replica's clock, so it ends on time
// whether or not a refresh ran; the replicas' clocks may disagree by the
// skew between them.
//
// A refresh is one GET of a version counter that every change bumps; only
// when it moved does the Table read the whole hash (HGETALL, in a script
// that measures it first) and swap in a new [Set]. Every 12th refresh
// reads the hash even if the counter did not move, so a hash edited by
// hand with redis-cli HSET is seen within 12 refreshes (a minute at the
// default 5s). A refresh that fails (Redis down) keeps the overrides
// loaded last, and is logged and counted; a Table that never loaded
// starts empty, so a service can start during an outage.
//
// A table holds at most 10,000 overrides, since every replica keeps them
// all in memory and reads them all again at every full load (measured:
// about 150 bytes kept per entry, and about 1 KB allocated per entry at
// each full load; at the bound and the default options, some 2 MB kept
// and 10 MB of garbage a minute per replica). [Table.Set] refuses a new
// one beyond the bound with an error wrapping [ErrTableFull] (after
// deleting the expired ones, which make room). A table written past the
// bound by hand is read up to it: the first fields by byte order load,
// the same in every replica, and the rest are refused, listed by
// floodgate override ls, counted in floodgate_overrides_invalid and
// logged in one line. An application with more per-key limits keeps them
// in its own store and builds a [Set] from it.
//
// Nor is a table read whose hash takes more than 64 MiB in Redis, as
// MEMORY USAGE counts it (10,000 overrides of the usual size take about
// 1.6 MB; 64 MiB holds some 50 overrides of keys of 1 MiB, the longest
// allowed): fields written by hand could otherwise make every replica
// take gigabytes at each full load, and Redis stall while it sends them.
// The script that reads the hash measures it first, in Redis, so an
// oversized hash is never sent; the load fails with an error wrapping
// [ErrTableFull] that gives the size. A Table keeps the overrides loaded
// last and counts and logs the failed refresh, and floodgate override ls
// fails with the same error. Find the large fields (redis-cli --bigkeys,
// HSCAN) and delete them. A hash under the bound costs a load at most a
// small multiple of its size, whatever it holds.
//
// # Key layout
//
// The overrides of a key prefix (Options.Prefix, the services'
// redisstore prefix) are one hash and its version counter, which share
// the hash tag {overrides}, so that they live in one Redis Cluster slot
// and one script updates both atomically:
//
//	<prefix>{overrides}            HASH  field "<rule>:<key>"
//	                                     value "limit=1000/1m0s,algorithm=sliding-window[,burst=N][,expires=RFC3339]"
//	<prefix>{overrides}:version    STRING, incremented by every set and delete
//
// For example fg:{overrides} holds api:customer-42 = limit=1000/1m0s,
// algorithm=sliding-window. Rule names have no colon, so the first colon
// of a field ends the name; the key keeps every byte. The state keys of
// redisstore ("<prefix>{<rule>:<key>}:...") always have a colon inside
// their braces, so they never collide with these two.
//
// Write access to the overrides key is as trusted as write access to the
// limits themselves: whoever can write the hash can give any key any
// limit within the bounds below, and stop every replica's refreshes by
// taking it past 64 MiB, so grant it (Redis ACLs) as you would the
// services' configuration. A service reads the table with EVALSHA (and
// EVAL), whose script calls GET, MEMORY USAGE and HGETALL; where MEMORY
// is refused (an ACL, a managed Redis that disables it) it reads the
// hash unmeasured, without the 64 MiB bound, rather than not at all.
//
// # Validation
//
// An override is validated when it is set ([Table.Set], [NewSet]), and
// again when a Table loads it. Its rule must pass floodgate.Rule.Validate
// (the bounds of every rule), and a token bucket must refill at most one
// token a microsecond, the stores' resolution (1000/1ms is the fastest of
// a millisecond). Its key is 1 byte to 1 MiB, and its expiry is absent
// (no expiry) or a time in the years 0 to 9999, which its stored form
// (RFC 3339) holds: a stored expires=0001-01-01T00:00:00Z, the zero time,
// is refused rather than read as no expiry. A value written by hand that
// does not parse or validate, or that is longer than 1 KiB (the command
// writes about 150 bytes at most), is skipped, logged once and counted in
// the floodgate_overrides_invalid gauge, and floodgate override ls lists
// it. The Limiter validates each hit against the rule in force, so a
// request whose cost exceeds an overridden capacity is an error, as it
// would be under any rule.
//
// # Metrics
//
// With Options.Registerer, labelled table="<prefix>{overrides}":
// floodgate_overrides (overrides in force in the process),
// floodgate_overrides_invalid (stored entries skipped as invalid, or
// refused beyond the bound, at the last load),
// floodgate_overrides_refresh_errors_total and
// floodgate_overrides_last_refresh_timestamp_seconds (alert when it
// lags). A registerer takes one Table per key prefix; [New] refuses a
// second.
//
// # Without Redis
//
// A [Set] is a fixed floodgate.Overrides for a memstore service, or for
// overrides that come from elsewhere (a plan table in the application's
// database): build a new Set with [NewSet] and swap it in an
// atomic.Pointer behind a floodgate.Overrides of your own.
package overrides
