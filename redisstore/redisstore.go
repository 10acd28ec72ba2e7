package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/rueidis"
)

// Defaults of [Options].
const (
	// DefaultPrefix starts every key the store writes.
	DefaultPrefix = "fg:"
	// DefaultDialTimeout bounds one connection attempt.
	DefaultDialTimeout = time.Second
	// DefaultRedialInterval is the least time between two connection
	// attempts while Redis has never been reached.
	DefaultRedialInterval = 500 * time.Millisecond
	// DefaultCallTimeout bounds a call whose context has no deadline.
	DefaultCallTimeout = 3 * time.Second
	// DefaultWriteTimeout is rueidis's ConnWriteTimeout for clients the
	// store builds: a connection that leaves a command unanswered longer
	// is closed.
	DefaultWriteTimeout = 3 * time.Second
)

// MaxPrefixLen is the longest [Options.Prefix] accepted.
const MaxPrefixLen = 64

// ErrInvalidOptions reports [Options] that cannot be used. Errors from
// [Options.Validate] and [New] wrap it.
var ErrInvalidOptions = errors.New("redisstore: invalid options")

// Options configures a [Store]. Exactly one of URL, Client and Conn must
// be set; every other field has a default.
type Options struct {
	// URL locates Redis, as parsed by rueidis.ParseURL:
	// "redis://[user:password@]host:port[/db]", "rediss://..." for TLS
	// (system roots), or "unix:///path/to/redis.sock". Query parameters:
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
	// Prefix starts every key: "<prefix>{<rule>:<key>}:s". Zero means
	// DefaultPrefix ("fg:"). At most MaxPrefixLen bytes, without braces (a
	// brace would move the Cluster hash tag).
	Prefix string
	// DialTimeout bounds one connection attempt of a store built from URL.
	// Zero means the URL's dial_timeout, or DefaultDialTimeout (1s).
	DialTimeout time.Duration
	// RedialInterval is the least time between two connection attempts of
	// a store built from URL while Redis has not been reached yet; calls in
	// between fail at once with an error wrapping
	// floodgate.ErrStoreUnavailable. Zero means DefaultRedialInterval
	// (500ms). Once connected, rueidis reconnects by itself.
	RedialInterval time.Duration
	// CallTimeout bounds each call whose context has no deadline, so that
	// no call waits forever on a dead Redis (rueidis retries a read-only
	// command until its context is done). Zero means DefaultCallTimeout
	// (3s). A floodgate.Limiter always sets a deadline of its own.
	CallTimeout time.Duration
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
		if _, err := rueidis.ParseURL(o.URL); err != nil {
			bad("URL: %v", err)
		}
	}
	if len(o.Prefix) > MaxPrefixLen {
		bad("prefix is %d bytes long, at most %d allowed", len(o.Prefix), MaxPrefixLen)
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		bad("prefix %q has a brace, which would change the keys' Cluster hash tag", o.Prefix)
	}
	if o.DialTimeout < 0 {
		bad("dial timeout %v is negative", o.DialTimeout)
	}
	if o.RedialInterval < 0 {
		bad("redial interval %v is negative", o.RedialInterval)
	}
	if o.CallTimeout < 0 {
		bad("call timeout %v is negative", o.CallTimeout)
	}
	return errors.Join(errs...)
}

// Store is a [floodgate.Store] that keeps the limits in Redis, so that
// every replica that shares the Redis shares the limits. Each Take, Peek
// and Refund is one atomic Lua script call that reads the time from the
// Redis server; on a Cluster, a check whose keys live in several slots is
// one call per slot, reserved and rolled back so that no key ever admits
// more than its limit (see the package documentation). A Store is safe
// for concurrent use; build one per process with [New] (the zero value is
// not usable) and Close it on shutdown.
type Store struct {
	prefix string
	owned  bool                 // the store built the client and closes it
	opt    rueidis.ClientOption // how to dial, when owned
	redial time.Duration
	callTO time.Duration

	client atomic.Pointer[clientRef] // nil until connected
	closed atomic.Bool
	batch  batchers // group commit of concurrent Takes (batch.go)

	x extra // the cross-slot path and Options.Conn (cluster.go, conn.go)

	mu       sync.Mutex
	dialing  chan struct{} // guarded by mu; closed when the dial in flight ends
	lastErr  error         // guarded by mu; why the last dial failed
	lastFail time.Time     // guarded by mu; when it failed
	dials    sync.WaitGroup
}

// clientRef boxes the client: rueidis clients of different kinds have
// different concrete types.
type clientRef struct{ c rueidis.Client }

var _ floodgate.Store = (*Store)(nil)

// New returns a store for opts. A store built from a URL connects in the
// background: New waits for the first connection at most until ctx is
// done, and a Redis that cannot be reached is not an error, so a service
// can start in the middle of an outage. Until Redis is reached, calls fail
// fast with an error wrapping floodgate.ErrStoreUnavailable, and a new
// connection attempt is made at most every RedialInterval.
func New(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Store{prefix: opts.Prefix, redial: opts.RedialInterval, callTO: opts.CallTimeout}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.redial == 0 {
		s.redial = DefaultRedialInterval
	}
	if s.callTO == 0 {
		s.callTO = DefaultCallTimeout
	}
	if opts.Client != nil {
		s.client.Store(&clientRef{opts.Client})
		return s, nil
	}
	if opts.Conn != nil {
		s.x.conn = opts.Conn
		return s, nil
	}
	opt, err := rueidis.ParseURL(opts.URL)
	if err != nil { // Validate parsed it already
		return nil, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
	}
	opt.DisableCache = true
	if opts.DialTimeout > 0 {
		opt.Dialer.Timeout = opts.DialTimeout
	} else if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = DefaultDialTimeout
	}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = DefaultWriteTimeout
	}
	s.opt, s.owned = opt, true
	_, _ = s.conn(ctx) // a failure is remembered and reported by the next call
	return s, nil
}

// Close releases the store. A store built from a URL closes its client
// (waiting for a connection attempt in flight, at most DialTimeout); a
// store built on Options.Client leaves that client open. Every later call
// fails with floodgate.ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	already := s.closed.Swap(true)
	s.mu.Unlock()
	if already {
		return nil
	}
	s.dials.Wait()
	s.x.shutdown()
	if r := s.client.Load(); r != nil && s.owned {
		r.c.Close()
	}
	return nil
}

// Ping checks that Redis answers, for a readiness probe.
func (s *Store) Ping(ctx context.Context) error {
	if s.x.conn != nil { // conn.go
		return s.pingOnConn(ctx)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return err
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		return s.fail(err)
	}
	return nil
}

// bound gives ctx the CallTimeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.callTO)
}

var errClosed = fmt.Errorf("redisstore: %w", floodgate.ErrClosed)

// conn returns the client, connecting first if needed.
func (s *Store) conn(ctx context.Context) (rueidis.Client, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if r := s.client.Load(); r != nil {
		return r.c, nil
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, errClosed
	}
	if r := s.client.Load(); r != nil {
		s.mu.Unlock()
		return r.c, nil
	}
	ch := s.dialing
	if ch == nil {
		if wait := s.redial - time.Since(s.lastFail); s.lastErr != nil && wait > 0 {
			err := s.lastErr
			s.mu.Unlock()
			return nil, fmt.Errorf("redisstore: connect: %w (next attempt in %v): %w", floodgate.ErrStoreUnavailable, wait.Round(time.Millisecond), err)
		}
		ch = make(chan struct{})
		s.dialing = ch
		s.dials.Add(1)
		go s.dial(ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("redisstore: connect: %w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	if r := s.client.Load(); r != nil {
		return r.c, nil
	}
	s.mu.Lock()
	err := s.lastErr
	s.mu.Unlock()
	return nil, fmt.Errorf("redisstore: connect: %w: %w", floodgate.ErrStoreUnavailable, err)
}

// dial builds the client. It runs in its own goroutine because
// rueidis.NewClient takes no context: callers wait for it only as long as
// their context allows.
func (s *Store) dial(done chan struct{}) {
	defer s.dials.Done()
	c, err := rueidis.NewClient(s.opt)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		s.lastErr, s.lastFail = err, time.Now()
	case s.closed.Load():
		c.Close()
	default:
		s.client.Store(&clientRef{c})
		s.lastErr = nil
	}
	s.dialing = nil
	close(done)
}

// fail wraps an error of a call to Redis. It names no operation: the
// caller's error does (a Limiter's reads "floodgate: take: redisstore:
// store unavailable: ...").
func (s *Store) fail(err error) error {
	switch {
	case errors.Is(err, floodgate.ErrClosed), errors.Is(err, floodgate.ErrStoreUnavailable):
		return err
	case s.closed.Load() && errors.Is(err, rueidis.ErrClosing):
		return errClosed
	}
	return fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
}
