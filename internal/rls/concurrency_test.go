package rls_test

import (
	"context"
	"io"
	"net/http"
	"strings"
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

// TestClusterAllOrNothing runs 2 instances on a Redis Cluster: a request
// of two descriptors whose keys live in different slots is still decided
// all-or-nothing, exactly, under 400 concurrent calls. The one-per-user
// limit is 50, the per-route limit 30: 30 calls pass and the users'
// counts hold exactly those 30.
func TestClusterAllOrNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3, 0)
	yaml := "domain: cl\nalgorithm: sliding_window\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 50}\n" +
		"  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 30}\n"
	dir := configDir(t, map[string]string{"cl.yaml": yaml})
	prefix := randomPrefix()
	fleet := []*service{
		start(t, setup{dir: dir, store: redisStore(t, cluster.URL(), prefix)}),
		start(t, setup{dir: dir, store: redisStore(t, cluster.URL(), prefix)}),
	}
	const calls = 400
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := fleet[i%2].client.ShouldRateLimit(context.Background(), req("cl", desc("user=u"), desc("route=r")))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 30 {
		t.Errorf("%d of %d calls allowed, want exactly the route's 30", allowed.Load(), calls)
	}
	// The user's limit saw only the 30 allowed requests: 20 left.
	resp := fleet[0].call(t, req("cl", peekDesc("user=u")))
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 20 {
		t.Errorf("user=u has %d left, want 20: denied requests were recorded", got)
	}
}

// TestExactOverJSON is the fleet proof through POST /json: 3 instances
// on one Redis, 300 concurrent requests on one descriptor with a limit of
// 100: exactly 100 answers 200 and 200 answer 429.
func TestExactOverJSON(t *testing.T) {
	const calls, limit = 300, 100
	url := "redis://" + redistest.Addr(t)
	yaml := "domain: exact\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100}\n"
	dir := configDir(t, map[string]string{"exact.yaml": yaml})
	prefix := randomPrefix()
	var fleet []*service
	for range 3 {
		fleet = append(fleet, start(t, setup{dir: dir, store: redisStore(t, url, prefix)}))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer client.CloseIdleConnections()
	codes := make(chan int, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client.Post(fleet[i%3].url+"/json", "application/json",
				strings.NewReader(`{"domain":"exact","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}`))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[200] != limit || count[429] != calls-limit {
		t.Errorf("statuses %v, want exactly %d 200s and %d 429s", count, limit, calls-limit)
	}
}
