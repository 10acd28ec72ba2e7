package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// Conn is the one seam between the store and a Redis client library: the
// four calls the store makes. The store runs on rueidis by itself (from
// [Options.URL] or [Options.Client]); package
// github.com/floodgate-rl/floodgate/redisstore/goredisadapter implements
// Conn for go-redis v9 clients (standalone, Sentinel and Cluster), so that
// a service can share the client it already has, and this package does
// not depend on go-redis. Every client gets the same store: the same
// scripts and keys, group commit, and checks across Cluster slots.
//
// Implementations must be safe for concurrent use and must return when
// ctx is done.
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

	lua *rueidis.Lua // the same script for the rueidis driver
}

func newScript(src string, readOnly bool) Script {
	sum := sha1.Sum([]byte(src))
	s := Script{Source: src, SHA1: hex.EncodeToString(sum[:]), ReadOnly: readOnly}
	// rueidis retries only commands marked retryable, which
	// NewLuaScript's are not.
	if readOnly {
		s.lua = rueidis.NewLuaScriptRetryable(src)
	} else {
		s.lua = rueidis.NewLuaScript(src)
	}
	return s
}
