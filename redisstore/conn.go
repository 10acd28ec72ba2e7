package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"

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
		return nil, s.fail(err)
	}
	res, err := parseValues(v, []int{len(hits)}, record)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return res[0], nil
}

// refundCall returns the keys and arguments of the refund script for the
// receipts of the take id (see refund.lua).
func (s *Store) refundCall(id string, receipts []floodgate.Receipt) (keys, args []string, err error) {
	keys = make([]string, 0, 2*len(receipts))
	args = make([]string, 1, 1+5*len(receipts))
	args[0] = id
	for i, r := range receipts {
		p, err := params(r.Hit)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: refund: hit %d: %w", i, err)
		}
		tag := s.tag(r.Hit.Rule.Name, r.Hit.Key)
		keys = append(keys, tag+p.suffix, tag+"r:"+p.suffix+":"+id)
		// A receipt no take gave (zero time) credits nothing: time 0 is
		// older than any window.
		at := max(0, min(r.Stamp.At.UnixMicro(), maxScriptValue))
		args = append(args, p.alg, strconv.FormatInt(p.cost, 10), strconv.FormatInt(p.b, 10),
			strconv.FormatInt(at, 10), strconv.FormatUint(r.Stamp.Epoch, 10))
	}
	return keys, args, nil
}

// refundOnConn is Refund on a Conn, for receipts of one slot.
func (s *Store) refundOnConn(ctx context.Context, id string, receipts []floodgate.Receipt) error {
	if s.closed.Load() {
		return errClosed
	}
	keys, args, err := s.refundCall(id, receipts)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.x.conn.Eval(ctx, connRefund, keys, args); err != nil {
		return s.fail(err)
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
		return s.fail(err)
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
		return s.fail(err)
	}
	return nil
}
