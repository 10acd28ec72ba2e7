package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/rueidis"
)

// rueidisConn is the [Conn] of a rueidis client: one the caller passed in
// Options.Client, or one the store dials from Options.URL. A dialed
// client connects in the background, so a service can start during an
// outage: until Redis is reached, calls fail at once with an error
// wrapping floodgate.ErrStoreUnavailable, and a connection is attempted
// at most every redial. Once connected, rueidis reconnects by itself.
type rueidisConn struct {
	opt    rueidis.ClientOption // how to dial; zero for a client passed in
	redial time.Duration

	client atomic.Pointer[clientRef] // nil until connected

	mu       sync.Mutex
	closed   bool          // guarded by mu
	dialing  chan struct{} // guarded by mu; closed when the dial in flight ends
	lastErr  error         // guarded by mu; why the last dial failed
	lastFail time.Time     // guarded by mu; when it failed
	dials    sync.WaitGroup
}

// clientRef boxes the client: rueidis clients of different kinds have
// different concrete types.
type clientRef struct{ c rueidis.Client }

var _ Conn = (*rueidisConn)(nil)

// onClient returns the driver of a client the caller owns.
func onClient(c rueidis.Client) *rueidisConn {
	rc := &rueidisConn{}
	rc.client.Store(&clientRef{c})
	return rc
}

// dialing returns the driver of a client built from opt, and waits for
// its first connection until ctx is done.
func dialing(ctx context.Context, opt rueidis.ClientOption, redial time.Duration) *rueidisConn {
	rc := &rueidisConn{opt: opt, redial: redial}
	_, _ = rc.get(ctx) // a failure is remembered and reported by the next call
	return rc
}

// Eval implements [Conn]. rueidis panics when a Cluster client builds a
// command whose keys are in different slots; the store rules that out
// first, and Eval turns any such panic into an error all the same: a bad
// call must never crash the service.
func (rc *rueidisConn) Eval(ctx context.Context, script Script, keys, args []string) (v []int64, err error) {
	c, err := rc.get(ctx)
	if err != nil {
		return nil, err
	}
	if c.Mode() == rueidis.ClientModeCluster {
		if err := sameSlot(keys); err != nil {
			return nil, err
		}
	}
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("rueidis panicked: %v", p)
		}
	}()
	msg, err := script.lua.Exec(ctx, c, keys, args).ToMessage()
	if err != nil {
		return nil, err
	}
	if msg.IsInt64() {
		n, err := msg.ToInt64()
		return []int64{n}, err
	}
	msgs, err := msg.ToArray()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	v = make([]int64, len(msgs))
	for i, m := range msgs {
		if v[i], err = m.ToInt64(); err != nil {
			return nil, fmt.Errorf("%w: value %d: %w", errMalformed, i, err)
		}
	}
	return v, nil
}

// Del implements [Conn].
func (rc *rueidisConn) Del(ctx context.Context, key string) error {
	c, err := rc.get(ctx)
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Del().Key(key).Build()).Error()
}

// Ping implements [Conn].
func (rc *rueidisConn) Ping(ctx context.Context) error {
	c, err := rc.get(ctx)
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

// Cluster implements [Conn]. Before the first connection it reports
// false; Eval checks slots again once connected.
func (rc *rueidisConn) Cluster() bool {
	r := rc.client.Load()
	return r != nil && r.c.Mode() == rueidis.ClientModeCluster
}

// close closes a client the driver dialed (waiting for a dial in flight,
// at most the dial timeout); a client passed in is left open.
func (rc *rueidisConn) close() {
	rc.mu.Lock()
	rc.closed = true
	rc.mu.Unlock()
	rc.dials.Wait()
	if r := rc.client.Load(); r != nil {
		r.c.Close()
	}
}

// get returns the client, connecting first if needed.
func (rc *rueidisConn) get(ctx context.Context) (rueidis.Client, error) {
	if r := rc.client.Load(); r != nil {
		return r.c, nil
	}
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return nil, errClosed
	}
	if r := rc.client.Load(); r != nil {
		rc.mu.Unlock()
		return r.c, nil
	}
	ch := rc.dialing
	if ch == nil {
		if wait := rc.redial - time.Since(rc.lastFail); rc.lastErr != nil && wait > 0 {
			err := rc.lastErr
			rc.mu.Unlock()
			return nil, fmt.Errorf("redisstore: connect: %w (next attempt in %v): %w", floodgate.ErrStoreUnavailable, wait.Round(time.Millisecond), err)
		}
		ch = make(chan struct{})
		rc.dialing = ch
		rc.dials.Add(1)
		go rc.dial(ch)
	}
	rc.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("redisstore: connect: %w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
	}
	if r := rc.client.Load(); r != nil {
		return r.c, nil
	}
	rc.mu.Lock()
	closed, err := rc.closed, rc.lastErr
	rc.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	return nil, fmt.Errorf("redisstore: connect: %w: %w", floodgate.ErrStoreUnavailable, err)
}

// dial builds the client. It runs in its own goroutine because
// rueidis.NewClient takes no context: callers wait for it only as long as
// their context allows.
func (rc *rueidisConn) dial(done chan struct{}) {
	defer rc.dials.Done()
	c, err := rueidis.NewClient(rc.opt)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case err != nil:
		rc.lastErr, rc.lastFail = err, time.Now()
	case rc.closed:
		c.Close()
	default:
		rc.client.Store(&clientRef{c})
		rc.lastErr = nil
	}
	rc.dialing = nil
	close(done)
}

// isClosing reports an error of a rueidis client closed under a call.
func isClosing(err error) bool { return errors.Is(err, rueidis.ErrClosing) }
