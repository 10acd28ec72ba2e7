package rlqs

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

//go:embed grant.lua
var grantLua string

// RedisLedger is a [Ledger] in Redis: every replica that shares the Redis
// shares each bucket's capacity. A grant is one call of grant.lua, atomic
// on the server and timed by the server's clock, so the replicas' clocks
// may disagree. A bucket is one hash, "<prefix>{rlqs:<sha256 of the
// bucket, 32 hex>}", one field per holder (about 60 bytes each), which
// expires with its last grant. It is safe for concurrent use.
type RedisLedger struct {
	script *rueidis.Lua
	prefix string
	opt    rueidis.ClientOption // dialled when client is nil
	owned  bool

	mu       sync.Mutex
	client   rueidis.Client // guarded by mu; nil until dialled
	lastFail time.Time      // guarded by mu
	dialing  bool           // guarded by mu: a dial is under way
	closed   bool           // guarded by mu
}

// NewRedisLedger returns a ledger on client (which it does not close),
// its keys starting with prefix ("fg:" when empty).
func NewRedisLedger(client rueidis.Client, prefix string) *RedisLedger {
	return &RedisLedger{script: rueidis.NewLuaScript(grantLua), prefix: cmpOr(prefix, "fg:"), client: client}
}

// DialRedisLedger returns a ledger that builds its own client from opt in
// the background, from its first use and again at most every 500ms while
// Redis cannot be reached; until then its grants fail at once. A service
// may start during a Redis outage. Close closes the client.
func DialRedisLedger(opt rueidis.ClientOption, prefix string) *RedisLedger {
	return &RedisLedger{script: rueidis.NewLuaScript(grantLua), prefix: cmpOr(prefix, "fg:"), opt: opt, owned: true}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// redialEvery spaces the attempts to connect while Redis is down.
const redialEvery = 500 * time.Millisecond

// conn returns the client, or starts dialling it in the background (at
// most every redialEvery) and fails at once: rueidis.NewClient takes no
// context, and no grant waits for a dial.
func (l *RedisLedger) conn() (rueidis.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, floodgate.ErrClosed
	case l.client != nil:
		return l.client, nil
	case !l.dialing && time.Since(l.lastFail) >= redialEvery:
		l.dialing = true
		go l.dial()
	}
	return nil, fmt.Errorf("rlqs: redis: %w: not connected", floodgate.ErrStoreUnavailable)
}

func (l *RedisLedger) dial() {
	c, err := rueidis.NewClient(l.opt)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dialing = false
	switch {
	case err != nil:
		l.lastFail = time.Now()
	case l.closed:
		c.Close()
	default:
		l.client = c
	}
}

// Key returns the Redis key of bucket.
func (l *RedisLedger) Key(bucket string) string {
	sum := sha256.Sum256([]byte(bucket))
	h := hex.EncodeToString(sum[:16])
	return l.prefix + "{rlqs:" + h + "}"
}

// Grant implements [Ledger]. It is never retried: a call that timed out
// may have run, and its grant then counts until its TTL, which
// under-admits and never over-admits.
func (l *RedisLedger) Grant(ctx context.Context, req GrantRequest) (Grant, error) {
	c, err := l.conn()
	if err != nil {
		return Grant{}, err
	}
	args := []string{req.Holder, strconv.FormatInt(req.Capacity, 10), strconv.FormatInt(req.Demand, 10),
		strconv.FormatInt(req.Keep, 10), strconv.FormatInt(req.Hysteresis, 10), strconv.FormatInt(req.TTL.Microseconds(), 10)}
	vs, err := l.script.Exec(ctx, c, []string{l.Key(req.Bucket)}, args).ToArray()
	if err != nil {
		return Grant{}, fmt.Errorf("rlqs: redis: grant: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	if len(vs) != 2 {
		return Grant{}, fmt.Errorf("rlqs: redis: grant: %w: reply of %d values, want 2", floodgate.ErrStoreUnavailable, len(vs))
	}
	share, err1 := vs[0].AsInt64()
	fair, err2 := vs[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return Grant{}, fmt.Errorf("rlqs: redis: grant: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return Grant{Share: share, Fair: fair}, nil
}

// Close closes the client the ledger built; a ledger given a client
// leaves it open.
func (l *RedisLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.owned && l.client != nil {
		l.client.Close()
	}
	return nil
}
