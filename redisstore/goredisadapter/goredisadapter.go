// Package goredisadapter lets a [redisstore.Store] run on a go-redis v9
// client that a service already has: standalone (*redis.Client), Sentinel
// (the *redis.Client of redis.NewFailoverClient) or Cluster
// (*redis.ClusterClient), any of them as a redis.UniversalClient.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
//	conn, err := goredisadapter.New(rdb)
//	if err != nil { ... }          // a *redis.Ring, or nil
//	store, err := redisstore.New(ctx, redisstore.Options{Conn: conn})
//
// The store runs the same Lua scripts, with the same keys, as a store on
// rueidis, and takes checks across Cluster slots the same way. A Sentinel
// client that routes reads to replicas (redis.NewFailoverClusterClient,
// or UniversalOptions with MasterName and RouteByLatency or
// RouteRandomly) is a *redis.ClusterClient: it works, and its checks of
// several identities take the Cluster path, one script per slot.
//
// # Retries
//
// go-redis retries a failed command up to MaxRetries times (3 by
// default), EVAL and EVALSHA included, and a replayed take script would
// count a hit twice. The adapter does not change the client's options,
// which the service owns: it sends every script that writes as a command
// whose NoRetry method reports true, which go-redis's retry loops
// (single node, Cluster, pipelines) honour. go-redis then still replays
// what cannot have run: a command refused before it was written (a
// connection closed by the pool), redirected by MOVED or ASK, or refused
// by a read-only replica. EVALSHA that fails with NOSCRIPT is followed by
// one EVAL, since the script did not run. The peek script writes nothing
// and keeps the client's retries.
//
// # Time budget
//
// go-redis applies a context's deadline to its socket reads and writes
// only when the client has ContextTimeoutEnabled; otherwise a hung Redis
// holds a command for ReadTimeout (3s by default). The adapter returns
// when the context is done either way: without ContextTimeoutEnabled, it
// waits for the command in a goroutine that ends when go-redis gives up.
// Set ContextTimeoutEnabled (and a small DialTimeout and DialerRetries)
// on the client to avoid those goroutines during an outage.
package goredisadapter

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Conn adapts a go-redis client to [redisstore.Conn]. It is safe for
// concurrent use. Build it with [New]; the zero value is not usable.
type Conn struct {
	client     redis.UniversalClient
	cluster    bool
	ctxTimeout bool // the client applies context deadlines itself
}

var _ redisstore.Conn = (*Conn)(nil)

// ErrUnsupported reports a client that the adapter cannot drive.
var ErrUnsupported = errors.New("goredisadapter: unsupported client")

// New returns an adapter for client, which it uses as it is and never
// closes. client must be a *redis.Client (standalone or Sentinel) or a
// *redis.ClusterClient; a *redis.Ring shards keys by its own hashing,
// which the store's hash tags do not pin, and is refused.
func New(client redis.UniversalClient) (*Conn, error) {
	switch c := client.(type) {
	case *redis.Client:
		if c == nil {
			break
		}
		return &Conn{client: c, ctxTimeout: c.Options().ContextTimeoutEnabled}, nil
	case *redis.ClusterClient:
		if c == nil {
			break
		}
		return &Conn{client: c, cluster: true, ctxTimeout: c.Options().ContextTimeoutEnabled}, nil
	case *redis.Ring:
		return nil, fmt.Errorf("%w: *redis.Ring places keys by consistent hashing, not by Cluster slot; use a Redis Cluster", ErrUnsupported)
	}
	return nil, fmt.Errorf("%w: %T; want *redis.Client or *redis.ClusterClient", ErrUnsupported, client)
}

// Cluster implements [redisstore.Conn].
func (c *Conn) Cluster() bool { return c.cluster }

// Ping implements [redisstore.Conn].
func (c *Conn) Ping(ctx context.Context) error {
	return c.process(ctx, redis.NewStatusCmd(ctx, "ping"))
}

// Del implements [redisstore.Conn]. DEL is idempotent, so it keeps the
// client's retries.
func (c *Conn) Del(ctx context.Context, key string) error {
	return c.process(ctx, redis.NewIntCmd(ctx, "del", key))
}

// Eval implements [redisstore.Conn]: EVALSHA, and EVAL after NOSCRIPT;
// never retried when the script writes.
func (c *Conn) Eval(ctx context.Context, script redisstore.Script, keys, args []string) ([]int64, error) {
	v, err := c.eval(ctx, "evalsha", script.SHA1, script.ReadOnly, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		v, err = c.eval(ctx, "eval", script.Source, script.ReadOnly, keys, args)
	}
	if err != nil {
		return nil, err
	}
	return ints(v)
}

func (c *Conn) eval(ctx context.Context, name, script string, readOnly bool, keys, args []string) (any, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	cmd := redis.NewCmd(ctx, a...)
	var run redis.Cmder = cmd
	if !readOnly {
		run = noRetry{cmd}
	}
	if err := c.process(ctx, run); err != nil {
		return nil, err
	}
	return cmd.Result()
}

// process runs cmd, and returns when ctx is done even if the client does
// not apply ctx's deadline to its sockets.
func (c *Conn) process(ctx context.Context, cmd redis.Cmder) error {
	if c.ctxTimeout {
		return c.client.Process(ctx, cmd)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- c.client.Process(ctx, cmd) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noRetry is a command that go-redis must not send again once it may
// have reached the server.
type noRetry struct{ *redis.Cmd }

// NoRetry reports true: a script that writes must not be replayed.
func (noRetry) NoRetry() bool { return true }

// ints converts a script reply: an integer, or an array of integers.
func ints(v any) ([]int64, error) {
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				return nil, fmt.Errorf("goredisadapter: script reply element %d is %T, want an integer", i, e)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("goredisadapter: script reply is %T, want an integer or an array", v)
}

// NewStore returns a redisstore.Store on client, with redisstore's
// default options: New and redisstore.New in one call. The store uses
// client as it is and never closes it; Close the store on shutdown all the
// same. For a key prefix or breaker options of your own, call New and pass
// the Conn in redisstore.Options.
func NewStore(client redis.UniversalClient) (*redisstore.Store, error) {
	conn, err := New(client)
	if err != nil {
		return nil, err
	}
	// A store on a Conn dials nothing: no context to wait on.
	return redisstore.New(context.Background(), redisstore.Options{Conn: conn})
}
