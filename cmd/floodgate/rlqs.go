package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/internal/rlqs"
	"github.com/floodgate-rl/floodgate/internal/rls"
)

// registerRLQS serves Envoy's rate_limit_quota filter (package rlqs) on
// gs, beside RLS: the same configuration in force (files or xDS), TLS,
// health and metrics. Its shares live in REDIS_URL's Redis, or in memory
// without it. Its streams end when ctx is done, as the shutdown starts, so
// that they do not hold up the graceful stop; Envoy keeps its assignments
// until their TTL and reconnects. The function returned ends them too and
// closes the Redis client.
func registerRLQS(ctx context.Context, gs *grpc.Server, cfg serveConfig, srv *rls.Server, reg prometheus.Registerer, logger *slog.Logger) (func(), error) {
	var ledger rlqs.Ledger = rlqs.NewMemLedger(nil)
	closer := func() {}
	if cfg.RedisURL != "" {
		opt, err := redisopt.FromURL(cfg.RedisURL, 0, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("%w: REDIS_URL: %s", errConfig, redisopt.Redact(err.Error(), cfg.RedisURL))
		}
		rl := rlqs.DialRedisLedger(opt, cfg.RedisPrefix)
		ledger, closer = rl, func() { rl.Close() }
	}
	q, err := rlqs.New(rlqs.Options{Config: srv.Config, Ledger: ledger, Registerer: reg, Logger: logger})
	if err != nil {
		closer()
		return nil, err
	}
	q.Register(gs)
	stop := context.AfterFunc(ctx, func() { q.Close() })
	return func() { stop(); q.Close(); closer() }, nil
}
