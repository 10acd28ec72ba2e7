package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Conn is a Redis client other than rueidis that a [Store] can run on,
// set in [Options.Conn]. Package
// github.com/floodgate-rl/floodgate/redisstore/goredisadapter implements
// it for go-redis v9 clients (standalone, Sentinel and Cluster), so that a
// service can share the client it already has; this package does not
// depend on go-redis.
//
// A Store on a Conn runs the same scripts with the same keys as a Store on
// rueidis, so both can share one Redis, and a check across Cluster slots
// takes the same reserve-and-roll-back path. Implementations must be safe
// for concurrent use and must return when ctx is done.
type Conn interface {
	// Eval runs script with keys and args: EVALSHA, then EVAL only if
	// the server answered NOSCRIPT (the script did not run). Unless
	// script.ReadOnly, a call that may have reached the server must never
	// be sent again: a timed-out or broken call may have run, and running
	// it twice would count a hit twice. The store's scripts reply with an
	// integer or an array of integers, returned as int64 values (one for
	// an integer).
	Eval(ctx context.Context, script Script, keys, args []string) ([]int64, error)
	// Del deletes key.
	Del(ctx context.Context, key string) error
	// Ping checks that Redis answers.
	Ping(ctx context.Context) error
	// Cluster reports whether the client talks to a Redis Cluster, where
	// one script may only touch keys of one hash slot.
	Cluster() bool
}

// Script is one of the store's Lua scripts, as a [Conn] receives it.
type Script struct {
	// Source is the script's Lua source, sent by EVAL.
	Source string
	// SHA1 is the hex SHA-1 of Source, sent by EVALSHA.
	SHA1 string
	// ReadOnly reports that this call writes nothing, so that sending it
	// again after a failure is harmless.
	ReadOnly bool
}

func newScript(src string, readOnly bool) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Source: src, SHA1: hex.EncodeToString(sum[:]), ReadOnly: readOnly}
}

var (
	connTake   = newScript(takeLua, false)
	connPeek   = newScript(takeLua, true)
	connRefund = newScript(refundLua, false)
)

// takeOnConn is Take (record) or Peek on a Conn, for hits of one slot:
// the take script with the arguments of one group.
func (s *Store) takeOnConn(ctx context.Context, op string, record bool, id string, hits []floodgate.Hit) ([]floodgate.Result, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	mode, script := "0", connPeek
	if record {
		mode, script = "1", connTake
	}
	keys, args, err := s.appendGroup(make([]string, 0, len(hits)), []string{mode, "1"}, op, group{id: id, hits: hits})
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := s.x.conn.Eval(ctx, script, keys, args)
	if err != nil {
		return nil, s.fail(op, err)
	}
	if len(v) != 4*len(hits) {
		return nil, fmt.Errorf("redisstore: %s: %w: %w: %d values for %d hits, want %d", op, floodgate.ErrStoreUnavailable, errMalformed, len(v), len(hits), 4*len(hits))
	}
	out := make([]floodgate.Result, len(hits))
	for i := range out {
		r, err := result([4]int64(v[4*i : 4*i+4]))
		if err != nil {
			return nil, fmt.Errorf("redisstore: %s: %w: %w: hit %d: %w", op, floodgate.ErrStoreUnavailable, errMalformed, i, err)
		}
		out[i] = r
	}
	return out, nil
}

// refundCall returns the keys and arguments of the refund script for the
// hits of the take id, sent age ago (see refund.lua).
func (s *Store) refundCall(id string, hits []floodgate.Hit, age time.Duration) (keys, args []string, err error) {
	keys = make([]string, 0, 2*len(hits))
	args = make([]string, 2, 2+4*len(hits))
	args[0] = id
	// In whole µs, rounded up (an older take is credited less), and capped
	// where the script's arithmetic stays exact (any age that large
	// credits nothing anyway).
	ageUS := int64(max(0, age) / time.Microsecond)
	if age%time.Microsecond > 0 {
		ageUS++
	}
	args[1] = strconv.FormatInt(min(ageUS, maxScriptValue), 10)
	for i, h := range hits {
		p, err := params(h)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: refund: hit %d: %w", i, err)
		}
		tag := s.tag(h.Rule.Name, h.Key)
		keys = append(keys, tag+p.suffix, tag+"r:"+p.suffix+":"+id)
		var a, ttl int64
		switch h.Rule.Algorithm {
		case floodgate.TokenBucket:
			a, ttl = p.b, ceilDiv(p.cost*p.b, 1000) // the most a refund credits
		case floodgate.FixedWindow, floodgate.SlidingWindowCounter:
			a = p.windowUS // the script times the tombstone to the window's end
		}
		args = append(args, p.suffix, strconv.FormatInt(p.cost, 10), strconv.FormatInt(a, 10), strconv.FormatInt(ttl, 10))
	}
	return keys, args, nil
}

// refundOnConn is Refund on a Conn, for hits of one slot.
func (s *Store) refundOnConn(ctx context.Context, id string, hits []floodgate.Hit, age time.Duration) error {
	if s.closed.Load() {
		return errClosed
	}
	keys, args, err := s.refundCall(id, hits, age)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.x.conn.Eval(ctx, connRefund, keys, args); err != nil {
		return s.fail("refund", err)
	}
	return nil
}

// resetOnConn is Reset on a Conn.
func (s *Store) resetOnConn(ctx context.Context, key string) error {
	if s.closed.Load() {
		return errClosed
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.x.conn.Del(ctx, key); err != nil {
		return s.fail("reset", err)
	}
	return nil
}

// pingOnConn is Ping on a Conn.
func (s *Store) pingOnConn(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.x.conn.Ping(ctx); err != nil {
		return s.fail("ping", err)
	}
	return nil
}
