package redisstore

import (
	"context"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
)

// direct is the store without its breaker: what the breaker guards.
type direct struct{ s *Store }

func (d direct) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return d.s.takeDirect(ctx, hits)
}

func (d direct) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	return d.s.peekDirect(ctx, hits)
}

func (d direct) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	return d.s.refundDirect(ctx, receipts)
}

func (d direct) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	return d.s.resetDirect(ctx, rule, key)
}

// State returns the state of the store's circuit breaker: what an
// enforce.Enforcer exports as floodgate_breaker_state
// (enforce.Options.Breaker). It is Closed where no breaker guards the
// store: with Options.NoBreaker, and on a Redis Cluster (Options.Breaker),
// even if the breaker opened before the store learnt it talks to one.
func (s *Store) State() breakerstore.State {
	if s.cb == nil || s.conn.Cluster() {
		return breakerstore.Closed
	}
	return s.cb.State()
}
