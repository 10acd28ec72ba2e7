// Package redisstore is a [floodgate.Store] that keeps the limits in Redis,
// so that every replica of a service that shares the Redis enforces them
// together.
//
//	store, err := redisstore.New(ctx, redisstore.Options{URL: "redis://127.0.0.1:6379/0"})
//	if err != nil { ... }             // only bad options fail
//	defer store.Close()
//	limiter, err := floodgate.New(store, floodgate.Options{})
//
// # Scripts and time
//
// Each Take, Peek and Refund is one call of a Lua script (take.lua,
// refund.lua, embedded in the package; each opens with its KEYS, ARGV and
// reply, and is sent after ring.lua, the time, TTLs and ring codec they
// share), sent as EVALSHA with a fallback to EVAL when the server answers
// NOSCRIPT. A script is atomic on the server, so no interleaving of
// replicas can make a key admit more than its limit, and a check of
// several hits records all of them or none. One take script call can
// carry several independent checks. [Store.Warm] loads the take and
// refund scripts and dials the client's connections ahead of traffic,
// for a service that must decide its first burst at full speed.
//
// # Group commit
//
// Concurrent Takes share script calls: while a call is in flight, the
// Takes that arrive queue and the next call carries them all (up to 128
// hits), each still all-or-nothing; a Take that finds nothing in flight is
// sent at once, so light load pays nothing. Leases of quota
// (floodgate.Hit.Lease, the Limiter's escrow) share the calls too. Every
// client gets it, rueidis or go-redis. batch.go holds the design.
//
// Time is the Redis server's: the scripts call TIME and count in integer
// microseconds, so replicas whose clocks disagree still agree on every
// limit. A script that takes or refunds is never retried by the store: a
// call that timed out on the client may still have run on the server.
// Peek writes nothing and may be retried. Refund is idempotent, so a
// caller may retry it.
//
// # Key layout
//
// Every key of one rule and one client key shares the hash tag
// {<rule>:<key>}, so all of them live in one Redis Cluster slot. A state
// key ends with the algorithm's letter and the window, as time.Duration
// writes it, since those and the name are a state's identity
// (floodgate.Store):
//
//	<prefix>{<rule>:<key>}:w:<window>        sliding window: string, a ring of the
//	                                         last Limit admitted times (up to Limit,
//	                                         at most 100, more in debt), 6 bytes each
//	                                         (µs after a base time), then a 34-byte
//	                                         header (epoch, head, count, the first live
//	                                         entry, the base, the first live entry's
//	                                         time, the newest time; see ring.lua)
//	<prefix>{<rule>:<key>}:h:<window>        concurrency (requests in flight): the
//	                                         sliding window's ring, one entry per
//	                                         lease held, the window its time to live;
//	                                         renew.lua moves a lease's entries on
//	<prefix>{<rule>:<key>}:t:<window>        token bucket: string "<TAT>:<epoch>",
//	                                         the theoretical arrival time in µs
//	<prefix>{<rule>:<key>}:f:<window>        fixed window: string
//	                                         "<window index>:<count>:<epoch>"
//	<prefix>{<rule>:<key>}:c:<window>        sliding-window counter: string
//	                                         "<window index>:<previous count>:<count>:<epoch>"
//	<prefix>{<rule>:<key>}:r:<alg>:<window>:<take>
//	                                         refund tombstone: "1", so a refund
//	                                         credits once; <take> is the take's
//	                                         name (floodgate.Stamp.Take) in base 36
//
// For example fg:{pix:acct-42}:w:1m0s. floodgate blocked finds keys
// by this layout, and [Store.PeekStored] peeks at a key found so, hashed
// ones included. A rule whose window or algorithm
// changes (a rolling deploy) starts from fresh keys, once; a changed limit
// or burst keeps them. Earlier versions kept a sliding window under other
// letters: s (a sorted set) and l (a ring of 7-byte times). Those keys are
// never read, and expire with their windows: at the upgrade every
// sliding-window key starts afresh, once, and during a rolling deploy the
// old and the new replicas count separately, so up to twice a limit may
// pass until the old replicas are gone.
//
// A ring's times are offsets below 2^48 µs (8.9 years) from its base.
// A take whose time would not fit rewrites the ring with its oldest live
// time as the new base, which always fits a window of up to 8.9 years. A
// longer window (a Rule allows ten years) whose ring still holds an entry
// 8.9 years old fails its takes with a [*StateError] rather than
// miscount.
//
// The epoch names a state: the take that creates it (the key is absent)
// writes 48 bits of a hash of its name, and later takes keep it. Take
// replies with each recorded hit's epoch and the server time, which the
// Limiter hands back to Refund: a refund credits only the state its take
// was recorded in (so nothing after a Reset or an expiry), and measures
// the take's age on the server's clock. What it credits is stated once,
// on floodgate.Store.Refund.
//
// The prefix defaults to "fg:". The client's key goes through the same
// encoding as every store's: kept as it is when it is at most 48 bytes of
// [A-Za-z0-9_.@+=:/-], otherwise replaced by "~" and 24 characters of its
// SHA-256. So no key, whatever its bytes (braces, newlines, invalid UTF-8,
// a megabyte), can add a hash tag, move a key to another slot or make a
// large key. Keys are kept in plain text: hash personal data such as tax
// ids before using them as keys if Redis must not see them.
//
// Every key expires: a sliding window one window after its newest entry,
// a token bucket when it is full again, a fixed window at the end of its
// window, a sliding-window counter at the end of the window after its
// last take, a tombstone as soon as a later refund of the same take could
// no longer credit anything (the end of the take's window; for a token
// bucket, cost times the emission interval).
//
// # Memory
//
// A token bucket, fixed window or counter takes about 120-136 bytes per
// key whatever its limit; a sliding window 6 bytes per request of its
// limit and about 130-200 bytes more in jemalloc's size classes (200 bytes
// at a limit of 10, 728 at 100, 6,232 at 1,000, 32,856 at 5,000), and 6
// more per request it owes past its limit, up to its limit and at most
// 100 of them (see floodgate.Hit.Overdraw). One hit costs at most 100, so
// one request makes a new key hold at most 728 bytes for its window (136
// for a hit of cost 1). Prefer the sliding window for small limits that
// must be exact (login, PIX transfers), the token bucket for large ones
// (API quotas).
// docs/CLUSTER.md in the repository has the measured table, on a
// standalone server and on a Cluster node, and how to size a deployment.
//
// # Redis modes
//
// [Options.URL] is parsed by rueidis.ParseURL:
//
//	redis://user:password@host:6379/0              standalone
//	rediss://host:6380                             standalone over TLS
//	unix:///run/redis/redis.sock?db=0              standalone on a Unix socket
//	redis://s1:26379?addr=s2:26379&master_set=main Sentinel (the addresses are sentinels)
//	redis://n1:6379?addr=n2:6379&addr=n3:6379      Cluster (detected by itself)
//
// Beside rueidis's query parameters, a rediss:// URL takes
// tls_cert=PATH and tls_key=PATH (a client certificate and its key, in
// PEM), tls_ca=PATH (CA certificates trusted beside the system's roots)
// and tls_skip_hostname=true (the server's chain verified, not the name
// it holds); a Sentinel URL takes sentinel_user=, sentinel_password= (the
// sentinels' credentials; the URL's are the master's) and, over TLS,
// sentinel_tls=true (the sentinels over TLS too). Behind Sentinel the
// master's certificate is verified against the master's own address.
// The files are read when the store is built.
//
// Or pass an existing rueidis client in [Options.Client], or another
// library's client in [Options.Conn]: package goredisadapter wraps a
// go-redis v9 client (standalone, Sentinel or Cluster) and sends the
// scripts that write without go-redis's retries. Client-side caching is
// off in clients the store builds; commands go to the primary. The
// scripts need Redis 5.0 or later; the tests run against Redis 7.0 on a
// standalone server, a Cluster of 3 masters and 3 replicas, and a master
// and a replica behind three sentinels, with both failovers under load.
//
// # Checks across Cluster slots
//
// The keys of one rule and one client key share a hash tag, so one hit
// never spans slots, but a check of two identities (an IP and an account)
// usually does. On a Cluster such a check is taken slot by slot in
// ascending slot order, and rolled back with an idempotent refund when a
// later slot denies: no key ever admits more than its limit, and the price
// is a moment of over-denial, never over-admission. cluster.go holds the
// design and its bounds; docs/CLUSTER.md the measurements.
//
// # Failover
//
// rueidis follows a Cluster's new topology and Sentinel's new master by
// itself: during a failover, calls fail (and take the route's failure
// mode) and then succeed again, without a restart. Redis replicates
// asynchronously, so a write acknowledged by a master that dies before its
// replica received it is lost: each lost hit is a request that no longer
// counts, and its key may admit that many more requests within the
// window (twice that for a token bucket or fixed window whose cross-slot
// roll-back was applied to the lost write). The docs/CLUSTER.md file of
// the repository has the measured failover windows and a sizing table.
//
// # Failures
//
// A store built from a URL connects in the background, so a service can
// start while Redis is down: until Redis answers, calls fail at once with
// an error wrapping floodgate.ErrStoreUnavailable, and a connection is
// attempted at most every 500ms (see [New]). Every call returns when its
// context is done, even when Redis hangs; the floodgate.Limiter gives each
// call its budget, and a call whose context has no deadline gets 3s, so
// that none waits forever on a dead Redis (rueidis retries a read-only
// command until its context is done). Every
// error the store returns starts with "redisstore: " and wraps
// floodgate.ErrStoreUnavailable (and the cause, such as
// context.DeadlineExceeded), floodgate.ErrClosed after Close, or
// floodgate.ErrInvalidHit / floodgate.ErrInvalidRule for a hit the scripts
// cannot compute exactly (windows longer than 2^51 µs, about 71 years).
//
// A key that Redis holds with a value the store did not write, a value of
// another type, or state the scripts cannot use (the ring above) fails
// the checks of that key with a [*StateError], which wraps
// floodgate.ErrCorruptState. The store answered and other keys are
// decided as usual, so a breakerstore in front of the store does not
// count it. No error text names a key or the prefix, since it may reach
// clients; StateError.Key gives the Redis key to an operator who repairs
// it. A Take that shared the corrupt key's script call (see Group commit)
// fails with it too, and was recorded if the call checked it first.
//
// A Redis at maxmemory with the noeviction policy keeps taking the
// limiter's writes: Redis refuses only a script's first write when that
// write may grow memory, and take.lua's first write to a sliding
// window's ring is a PEXPIRE, which cannot. This is
// deliberate: limits keep holding when Redis is full of other data, and
// the limiter's entries are bounded by the limits and expire with their
// windows. Leave room for them when sizing maxmemory.
package redisstore
