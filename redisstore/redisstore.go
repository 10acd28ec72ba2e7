package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/algo"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/redis/rueidis"
)

// Defaults of [Options].
const (
	// defaultDialTimeout bounds one connection attempt.
	defaultDialTimeout = time.Second
	// defaultRedialInterval is the least time between two connection
	// attempts while Redis has never been reached.
	defaultRedialInterval = 500 * time.Millisecond
	// defaultCallTimeout bounds a call whose context has no deadline.
	defaultCallTimeout = 3 * time.Second
	// defaultWriteTimeout is rueidis's ConnWriteTimeout for clients the
	// store builds: a connection that leaves a command unanswered longer
	// is closed.
	defaultWriteTimeout = 3 * time.Second
)

// maxPrefixLen is the longest [Options.Prefix] accepted.
const maxPrefixLen = 64

// ErrInvalidOptions reports [Options] that cannot be used. Errors from
// [Options.Validate] and [New] wrap it.
var ErrInvalidOptions = errors.New("redisstore: invalid options")

// Options configures a [Store]. Exactly one of URL, Client and Conn must
// be set; every other field has a default.
type Options struct {
	// URL locates Redis, as parsed by rueidis.ParseURL:
	// "redis://[user:password@]host:port[/db]", "rediss://..." for TLS
	// (system roots; tls_cert, tls_key, tls_ca, tls_skip_hostname: see the
	// package documentation), or "unix:///path/to/redis.sock". Query parameters:
	// addr=host:port (more seed addresses; a Cluster is detected by
	// itself), master_set=name (Sentinel: the addresses are sentinels),
	// dial_timeout=1s, write_timeout=3s, client_name, protocol=2. The store
	// owns the client it builds and closes it on Close.
	URL string
	// Client is an existing rueidis client (standalone, Sentinel or
	// Cluster). The store uses it as it is and does not close it. Build it
	// with DisableCache: true unless the server supports client-side
	// caching, and keep rueidis's default retry policy (read-only commands
	// only).
	Client rueidis.Client
	// Conn is an existing client of another library, such as a go-redis
	// client wrapped by package goredisadapter. The store uses it as it is
	// and does not close it.
	Conn Conn
	// Prefix starts every key: "<prefix>{<rule>:<key>}:w:1m0s" (see the
	// package documentation). Zero means "fg:". At most 64 bytes,
	// without braces (a brace would move the Cluster hash tag). Services that share one Redis and use the same rule
	// names for different limits need distinct prefixes.
	Prefix string
	// Breaker configures the circuit breaker that guards the store by
	// default (see package breakerstore): while Redis fails, a call fails
	// at once instead of waiting out its budget, and the breaker probes
	// Redis again by itself. The zero value is breakerstore's defaults.
	// On a Redis Cluster the store calls Redis without it: one breaker
	// over every master would fail every key when one master dies, where
	// only that master's keys fail without it (docs/CLUSTER.md).
	Breaker breakerstore.Options
	// NoBreaker turns the breaker off: for a caller that puts a
	// breakerstore of its own in front of the store.
	NoBreaker bool

	// redialInterval, when set, replaces the 500ms between two connection
	// attempts (the tests' fast or slow redials), and callTimeout the 3s
	// bound of a call without a deadline (the tests' short outages).
	redialInterval time.Duration
	callTimeout    time.Duration
}

// Validate reports every problem with o, each wrapping [ErrInvalidOptions].
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	set := 0
	for _, ok := range []bool{o.URL != "", o.Client != nil, o.Conn != nil} {
		if ok {
			set++
		}
	}
	switch {
	case set == 0:
		bad("set URL, Client or Conn")
	case set > 1:
		bad("set only one of URL, Client and Conn")
	case o.URL != "":
		if _, err := redisopt.FromURL(o.URL, 0, 0); err != nil {
			bad("URL: %v", err)
		}
	}
	if len(o.Prefix) > maxPrefixLen {
		bad("prefix is %d bytes long, at most %d allowed", len(o.Prefix), maxPrefixLen)
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		bad("prefix %q has a brace, which would change the keys' Cluster hash tag", o.Prefix)
	}
	if o.redialInterval < 0 {
		bad("redial interval %v is negative", o.redialInterval)
	}
	if o.callTimeout < 0 {
		bad("call timeout %v is negative", o.callTimeout)
	}
	if !o.NoBreaker {
		if err := o.Breaker.Validate(); err != nil {
			bad("Breaker: %v", err)
		}
	}
	return errors.Join(errs...)
}

// Store is a [floodgate.Store] that keeps the limits in Redis, so that
// every replica that shares the Redis shares the limits. Each Take, Peek
// and Refund is one atomic Lua script call that reads the time from the
// Redis server; concurrent Takes share calls (batch.go), and on a Cluster
// a check whose keys live in several slots is one call per slot, reserved
// and rolled back so that no key ever admits more than its limit
// (cluster.go). A Store is safe for concurrent use; build one per process
// with [New] (the zero value is not usable) and Close it on shutdown.
type Store struct {
	prefix string
	callTO time.Duration
	conn   Conn         // the driver: rueidis (rueidis.go) or another client's
	dialed *rueidisConn // the driver the store dialed from Options.URL, which Close closes
	closed atomic.Bool
	batch  batchers            // group commit of concurrent Takes (batch.go)
	names  takeNames           // the names of its takes (takename.go)
	roll   rollbacks           // roll-backs retried in the background (cluster.go)
	cb     *breakerstore.Store // the breaker; nil with Options.NoBreaker
}

var _ floodgate.Store = (*Store)(nil)

// New returns a store for opts. A store built from a URL connects in the
// background: New waits for the first connection at most until ctx is
// done, and a Redis that cannot be reached is not an error, so a service
// can start in the middle of an outage. Until Redis is reached, calls fail
// fast with an error wrapping floodgate.ErrStoreUnavailable, and a new
// connection attempt is made at most every 500ms (each bounded by the
// URL's dial_timeout, 1s by default). Once connected, rueidis reconnects
// by itself.
func New(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Store{prefix: cmp.Or(opts.Prefix, rediskeys.DefaultPrefix), callTO: cmp.Or(opts.callTimeout, defaultCallTimeout)}
	s.names.seed()
	switch {
	case opts.Client != nil:
		s.conn = onClient(opts.Client)
	case opts.Conn != nil:
		s.conn = opts.Conn
	default:
		opt, err := redisopt.FromURL(opts.URL, 0, defaultDialTimeout)
		if err != nil { // Validate parsed it already
			return nil, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
		}
		if opt.ConnWriteTimeout == 0 {
			opt.ConnWriteTimeout = defaultWriteTimeout
		}
		s.dialed = dialing(ctx, opt, cmp.Or(opts.redialInterval, defaultRedialInterval))
		s.conn = s.dialed
	}
	if !opts.NoBreaker {
		cb, err := breakerstore.New(direct{s}, opts.Breaker)
		if err != nil { // Validate checked the options
			s.Close()
			return nil, fmt.Errorf("%w: Breaker: %w", ErrInvalidOptions, err)
		}
		s.cb = cb
	}
	return s, nil
}

// guard returns what the exported calls go through: the breaker, but on
// a Redis Cluster, or without one. On a Cluster one breaker over the
// whole store would turn one master's outage into every key's: under
// concurrent traffic the failures of its keys open it at once
// (TestClusterMasterDownLeavesOtherMastersUp). A dead master's keys fail
// on their own there, fast (the connection is refused), while the other
// masters' keep deciding. Whether the client talks to a Cluster may be
// learnt only at its first connection, so it is asked on every call.
func (s *Store) guard() floodgate.Store {
	if s.cb != nil && !s.conn.Cluster() {
		return s.cb
	}
	return direct{s}
}

// Close releases the store. A store built from a URL closes its client
// (waiting for a connection attempt in flight, at most DialTimeout); a
// store built on Options.Client or Options.Conn leaves that client open.
// Every later call fails with floodgate.ErrClosed. Close is safe to call
// more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.roll.shutdown()
	if s.dialed != nil {
		s.dialed.close()
	}
	return nil
}

// Take implements [floodgate.Store] with one script call, which it may
// share with concurrent Takes of the same slot (batch.go). On a Cluster, a
// check whose hits live in several slots takes one script call per slot,
// reserving and rolling back (cluster.go). It names the take (see
// takename.go) in the stamp of every hit it recorded. Take, Peek, Refund,
// Renew and Reset go through the store's breaker, except with
// Options.NoBreaker or on a Redis Cluster (Options.Breaker).
func (s *Store) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.guard().Take(ctx, hits)
}

func (s *Store) takeDirect(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if err := algo.LeaseError(hits); err != nil {
		return nil, fmt.Errorf("redisstore: take: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	t := s.names.next()
	if groups := s.slotGroups(hits); groups != nil {
		return s.takeSlots(ctx, t, groups, len(hits))
	}
	res, err := s.take(ctx, t, hits)
	if errors.Is(err, errCrossSlot) {
		// The driver learnt it talks to a Cluster only now (a rueidis
		// client's first connection): nothing ran, take again by slot.
		if groups := s.slotGroups(hits); groups != nil {
			return s.takeSlots(ctx, t, groups, len(hits))
		}
		res, err = s.take(ctx, t, hits)
	}
	named(res, t)
	return res, err
}

// Peek implements [floodgate.Store]: the take script in a mode that
// writes nothing (one call per slot on a Cluster, concurrently).
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return s.guard().Peek(ctx, hits)
}

func (s *Store) peekDirect(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if groups := s.slotGroups(hits); groups != nil {
		return s.peekSlots(ctx, groups, len(hits))
	}
	res, err := s.peek(ctx, hits)
	if errors.Is(err, errCrossSlot) { // see Take
		if groups := s.slotGroups(hits); groups != nil {
			return s.peekSlots(ctx, groups, len(hits))
		}
	}
	return res, err
}

// Refund implements [floodgate.Store] with one script call (one per slot
// on a Cluster, concurrently). A sliding window removes the take's
// members; a token bucket, fixed window or sliding-window counter credits
// what provably remains of the take, from the take's server time and the
// state's epoch (see refund.lua), once, remembered by a tombstone key that
// is named by the take's name (the receipt's Stamp.Take) and lives as long
// as a later refund could credit anything.
func (s *Store) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	return s.guard().Refund(ctx, receipts)
}

func (s *Store) refundDirect(ctx context.Context, receipts []floodgate.Receipt) error {
	if len(receipts) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.refundAll(ctx, receipts)
}

// refundAll is Refund under a deadline: one script per slot.
func (s *Store) refundAll(ctx context.Context, receipts []floodgate.Receipt) error {
	hits := make([]floodgate.Hit, len(receipts))
	for i, r := range receipts {
		hits[i] = r.Hit
	}
	if groups := s.slotGroups(hits); groups != nil {
		return s.refundSlots(ctx, receipts, groups)
	}
	err := s.refund(ctx, receipts)
	if errors.Is(err, errCrossSlot) { // see Take
		if groups := s.slotGroups(hits); groups != nil {
			return s.refundSlots(ctx, receipts, groups)
		}
	}
	return err
}

// Reset implements [floodgate.Store]: it deletes the key's state under
// rule. Tombstones of earlier refunds are left to expire.
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	return s.guard().Reset(ctx, rule, key)
}

func (s *Store) resetDirect(ctx context.Context, rule floodgate.Rule, key string) error {
	if int(rule.Algorithm) >= len(suffixes) {
		return fmt.Errorf("redisstore: reset: %w: unknown algorithm %v", floodgate.ErrInvalidRule, rule.Algorithm)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.call(func() error { return s.conn.Del(ctx, s.tag(rule.Name, key)+stateSuffix(rule)) })
}

// Ping checks that Redis answers, for a readiness probe.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.call(func() error { return s.conn.Ping(ctx) })
}

// eval runs script on the driver: every script call of the store goes
// through it. Redis's refusal of what one of keys holds becomes a
// *StateError.
func (s *Store) eval(ctx context.Context, script Script, keys, args []string) ([]int64, error) {
	if s.conn.Cluster() {
		if err := sameSlot(keys); err != nil {
			return nil, err
		}
	}
	var v []int64
	err := s.call(func() (err error) {
		v, err = s.conn.Eval(ctx, script, keys, args)
		if err != nil {
			if se := s.stateError(err, keys); se != nil {
				return se // without the reply, which names the key
			}
		}
		return err
	})
	return v, err
}

// call runs one call of the driver on an open store, and wraps its error.
func (s *Store) call(f func() error) error {
	if s.closed.Load() {
		return errClosed
	}
	err := f()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, floodgate.ErrClosed), errors.Is(err, floodgate.ErrStoreUnavailable):
		return err
	case s.closed.Load() && isClosing(err):
		return errClosed
	}
	return fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
}

// bound gives ctx the call timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.callTO)
}

var errClosed = fmt.Errorf("redisstore: %w", floodgate.ErrClosed)
