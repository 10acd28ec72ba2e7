package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	pbcore "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A workload is the set of requests the callers send, each picking the
// next one from a random start.
type workload struct {
	name string
	reqs []*pb.RateLimitRequest
	// decisions is how many descriptors each request carries.
	decisions int
}

// workloads builds the three workloads over values distinct values of
// domain "bench" (bench/rls/ratelimit/config/bench.yaml).
func workloads(values int) []workload {
	desc := func(kv ...string) *pbcore.RateLimitDescriptor {
		d := &pbcore.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &pbcore.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	allowed := workload{name: "allowed", decisions: 1}
	three := workload{name: "3 descriptors", decisions: 3}
	for i := range values {
		allowed.reqs = append(allowed.reqs, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*pbcore.RateLimitDescriptor{
			desc("user", fmt.Sprintf("user-%05d", i)),
		}})
		three.reqs = append(three.reqs, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*pbcore.RateLimitDescriptor{
			desc("user", fmt.Sprintf("user-%05d", i)),
			desc("ip", fmt.Sprintf("198.51.100.%d/%d", i%256, i)),
			desc("tenant", fmt.Sprintf("tenant-%05d", (i*7919)%values)),
		}})
	}
	attack := workload{name: "attack", decisions: 1, reqs: []*pb.RateLimitRequest{{Domain: "bench", Descriptors: []*pbcore.RateLimitDescriptor{
		desc("attacker", "hot"),
	}}}}
	return []workload{allowed, attack, three}
}

// A tally is what the callers saw in one cell (or several, added).
type tally struct {
	calls, ok, over, errs int64
	elapsed               time.Duration
	lats                  []time.Duration
	firstErr              string
}

func (t *tally) add(o tally) {
	t.calls += o.calls
	t.ok += o.ok
	t.over += o.over
	t.errs += o.errs
	t.elapsed += o.elapsed
	t.lats = append(t.lats, o.lats...)
	if t.firstErr == "" {
		t.firstErr = o.firstErr
	}
}

func (t *tally) quantile(q float64) time.Duration {
	if len(t.lats) == 0 {
		return 0
	}
	slices.Sort(t.lats)
	return t.lats[min(len(t.lats)-1, int(q*float64(len(t.lats))))]
}

// A loader is the load generator: callers goroutines over conns
// connections to one service.
type loader struct {
	conns   []*grpc.ClientConn
	clients []pb.RateLimitServiceClient
}

func newLoader(addr string, conns int) (*loader, error) {
	l := &loader{}
	for range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			l.close()
			return nil, err
		}
		c.Connect()
		l.conns = append(l.conns, c)
		l.clients = append(l.clients, pb.NewRateLimitServiceClient(c))
	}
	return l, nil
}

func (l *loader) close() {
	for _, c := range l.conns {
		c.Close()
	}
}

// run sends w's requests from callers goroutines for d, each call with
// the timeout, and tallies the answers.
func (l *loader) run(ctx context.Context, w workload, callers int, d, timeout time.Duration) tally {
	var (
		mu  sync.Mutex
		all tally
		wg  sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := l.clients[c%len(l.clients)]
			i := rand.IntN(len(w.reqs))
			var t tally
			t.lats = make([]time.Duration, 0, 4096)
			for {
				now := time.Now()
				if now.After(deadline) || ctx.Err() != nil {
					break
				}
				cctx, cancel := context.WithTimeout(ctx, timeout)
				resp, err := client.ShouldRateLimit(cctx, w.reqs[i])
				cancel()
				t.lats = append(t.lats, time.Since(now))
				t.calls++
				switch {
				case err != nil:
					t.errs++
					if t.firstErr == "" {
						t.firstErr = err.Error()
					}
				case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
					t.over++
				default:
					t.ok++
				}
				if i++; i == len(w.reqs) {
					i = 0
				}
			}
			mu.Lock()
			all.add(t)
			mu.Unlock()
		}()
	}
	wg.Wait()
	all.elapsed = time.Since(start)
	return all
}
