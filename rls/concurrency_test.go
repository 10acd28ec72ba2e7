package rls_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestExactUnderConcurrency is the proof that a limit holds across a
// fleet: 3 instances on one Redis, 1,000 concurrent ShouldRateLimit calls
// spread over them on one descriptor with a limit of 100, exactly 100
// OK, for each algorithm. The window is a day, so that no window turns
// and no token refills while the calls run.
func TestExactUnderConcurrency(t *testing.T) {
	const calls, limit = 1000, 100
	url := "redis://" + redistest.Addr(t)
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_window_counter", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			yaml := "domain: exact\nalgorithm: " + alg + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100}\n"
			dir := configDir(t, map[string]string{"exact.yaml": yaml})
			prefix := randomPrefix()
			var fleet []*service
			for range 3 {
				fleet = append(fleet, start(t, setup{dir: dir, store: redisStore(t, url, prefix)}))
			}
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, calls)
			start := make(chan struct{})
			for i := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resp, err := fleet[i%3].client.ShouldRateLimit(context.Background(), req("exact", desc("user=alice")))
					switch {
					case err != nil:
						errs <- err
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						allowed.Add(1)
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
						denied.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("call failed: %v", err)
			}
			if allowed.Load() != limit || denied.Load() != calls-limit {
				t.Errorf("%s: %d allowed, %d denied of %d calls; want exactly %d allowed", alg, allowed.Load(), denied.Load(), calls, limit)
			}
		})
	}
}
