package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The warm-up's bounds: how long the service waits for it at start, and
// how often it tries again, at start and then in the background.
const (
	warmAtStart = 2 * time.Second
	warmRetry   = 250 * time.Millisecond
	warmLater   = time.Second
)

// warmUp readies the store before the service listens (docs/SERVICE.md,
// "Readiness"): a fresh replica that took traffic with its scripts not
// loaded and its connections not dialled paid for both within the
// decision budget of its first calls, and those that missed it answered
// Unavailable, which Envoy passes unlimited under failure_mode_deny:
// false. It tries for warmAtStart at most; if Redis
// cannot be reached by then, the service starts all the same and decides
// by the failure modes, as a running replica does in an outage, and the
// warm-up goes on in the background until it succeeds. The returned
// function stops it and waits for it; call it before closing the store.
// Its errors are logged with url's password redacted.
func warmUp(ctx context.Context, rs *redisstore.Store, logger *slog.Logger, url string) (stop func()) {
	began := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	try := func(d time.Duration) error {
		tctx, tcancel := context.WithTimeout(ctx, d)
		defer tcancel()
		return rs.Warm(tctx)
	}
	var err error
	for {
		left := warmAtStart - time.Since(began)
		if err = try(left); err == nil {
			logger.Info("redis warmed up: connections dialled, scripts loaded", "took", time.Since(began).Round(time.Millisecond))
			return cancel
		}
		if left = warmAtStart - time.Since(began); left <= warmRetry || !sleep(ctx, warmRetry) {
			break
		}
	}
	if ctx.Err() != nil {
		return cancel
	}
	logger.Warn("redis not warmed up at start: serving by the failure modes until it is, warming up in the background",
		"waited", time.Since(began).Round(time.Millisecond), "err", redisopt.Redact(err.Error(), url))
	var wg sync.WaitGroup
	wg.Go(func() {
		for sleep(ctx, warmLater) {
			if err := try(warmLater); err == nil {
				logger.Info("redis warmed up: connections dialled, scripts loaded", "took", time.Since(began).Round(time.Millisecond))
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
