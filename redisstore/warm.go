package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// warmPeeks is how many peeks [Store.Warm] sends. A rueidis client
// spreads the calls that name keys over 2^PipelineMultiplex connections
// per node (2 on 2 cores, 4 from 4 cores on), at random, and dials each
// at its first call; on a Cluster the keys spread over the masters too.
// The 127 that follow the first reach each of 4 connections but with a
// chance of about 4·(3/4)^127 (5·10^-16) that one is missed, and each of
// 12 (a Cluster of 3 masters) but with about 0.02%; a connection missed is
// dialled by the first call that picks it, as without a warm-up.
const warmPeeks = 128

// warmParallel is how many of those peeks are in flight at once.
const warmParallel = 16

// Warm readies the store to decide at full speed, for a service to call
// before it takes traffic: it loads the store's take and refund scripts
// into Redis and dials the client's connections, so that the first
// decisions neither wait for a connection nor send a script's source (the
// take script is some 24 KB, sent by every call that meets NOSCRIPT). It
// peeks at keys of a rule of its own (floodgate-warm-up), which writes
// nothing, and calls Redis without the breaker, so that a failed warm-up
// does not open it. It returns nil once every peek was answered, or an
// error (wrapping floodgate.ErrStoreUnavailable while Redis cannot be
// reached, at once while the store waits to dial again). It may be called
// again, and beside other calls. Without a deadline in ctx it takes at
// most the call timeout (3s).
func (s *Store) Warm(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// The peeks name keys of a rule of its own, which they only read.
	warmRule := floodgate.Rule{Name: "floodgate-warm-up", Limit: 1, Window: time.Second}
	if _, err := s.eval(ctx, refundScript, nil, nil); err != nil { // no hit: loads the script, credits nothing
		return fmt.Errorf("redisstore: warm-up: %w", err)
	}
	// One peek alone loads the take script (EVALSHA, NOSCRIPT, EVAL), so
	// that the concurrent ones do not each send its source.
	if _, err := s.peekDirect(ctx, []floodgate.Hit{{Rule: warmRule, Key: "0", Cost: 1}}); err != nil {
		return fmt.Errorf("redisstore: warm-up: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range warmParallel {
		wg.Go(func() {
			for i := range next {
				_, err := s.peekDirect(ctx, []floodgate.Hit{{Rule: warmRule, Key: strconv.Itoa(i), Cost: 1}})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
send:
	for i := 1; i < warmPeeks; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break send
		}
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("redisstore: warm-up: %d of %d peeks failed: %w", len(errs), warmPeeks, errs[0])
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: warm-up: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return nil
}
