package rls_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// BenchmarkShouldRateLimit measures decisions through the generated gRPC
// client on loopback, as Envoy calls, with clients in parallel: on
// memstore (the service's own cost) and on Redis, per algorithm, each
// call on one of 10,000 descriptor values. docs/SERVICE.md quotes a run.
func BenchmarkShouldRateLimit(b *testing.B) {
	const values = 10_000
	for _, store := range []string{"memory", "redis"} {
		for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket"} {
			b.Run(store+"/"+alg, func(b *testing.B) {
				var st floodgate.Store = memstore.New(memstore.Options{})
				if store == "redis" {
					st = freshRedis(b)
				}
				yaml := "domain: bench\ndescriptors:\n  - key: user\n    algorithm: " + alg +
					"\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
				svc := start(b, setup{yaml: yaml, store: st})
				reqs := make([]*rlsv3.RateLimitRequest, values)
				for i := range reqs {
					reqs[i] = req("bench", desc("user=u"+strconv.Itoa(i)))
				}
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := svc.client.ShouldRateLimit(context.Background(), reqs[n.Add(1)%values])
						if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
							b.Errorf("%v, %v", resp, err)
							return
						}
					}
				})
				if b.N >= values && n.Load() < values {
					b.Fatalf("%d calls cover fewer than the %d values claimed", n.Load(), values)
				}
			})
		}
	}
}

// BenchmarkServer measures the service's own path, without gRPC: a
// direct call of ShouldRateLimit on memstore, one descriptor of 10,000
// values per request, or three (three limits); allocs/op are the
// service's and the core's, the figure its changes are judged by.
func BenchmarkServer(b *testing.B) {
	const values = 10_000
	yaml := "domain: bench\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n" +
		"  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n" +
		"  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n"
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"-descriptors", func(b *testing.B) {
			svc := start(b, setup{yaml: yaml, store: memstore.New(memstore.Options{})})
			reqs := make([]*rlsv3.RateLimitRequest, values)
			for i := range reqs {
				ds := []string{"user=u" + strconv.Itoa(i), "ip=192.0.2." + strconv.Itoa(i%256) + "/" + strconv.Itoa(i), "tenant=t" + strconv.Itoa(i)}
				r := req("bench")
				for _, d := range ds[:n] {
					r.Descriptors = append(r.Descriptors, desc(d))
				}
				reqs[i] = r
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := svc.srv.ShouldRateLimit(ctx, reqs[i%values])
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
					b.Fatalf("%v, %v", resp, err)
				}
				i++
			}
			if b.N >= values && i < values {
				b.Fatalf("%d calls cover fewer than the %d values claimed", i, values)
			}
		})
	}
}

// BenchmarkSmallCallsUnderJSONFlood measures small gRPC calls, one after
// another, while 64 callers post 1 MiB /json bodies (256 descriptors of
// 4 KB values) to the same process (without the byte budget, 100
// concurrent 1 MiB bodies made small gRPC calls take 1.9 to 2.9 s): their p50, p99
// and slowest, and the bodies answered and refused (429) meanwhile. Run
// it alone: go test -run '^$' -bench SmallCallsUnderJSONFlood -benchtime 2s ./internal/rls.
func BenchmarkSmallCallsUnderJSONFlood(b *testing.B) {
	svc := start(b, setup{yaml: floodConfig, store: memstore.New(memstore.Options{})})
	big := make([]*commonv3.RateLimitDescriptor, 256)
	for i := range big {
		big[i] = desc(fmt.Sprintf("v=%d-%s", i, strings.Repeat("x", 4000)))
	}
	body, err := protojson.Marshal(req("flood", big...))
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var posted, busy atomic.Int64
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				r, _ := http.NewRequestWithContext(ctx, http.MethodPost, svc.url+"/json", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				res, err := hc.Do(r)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				posted.Add(1)
				if res.StatusCode == http.StatusTooManyRequests {
					busy.Add(1)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // the flood under way
	small := req("flood", desc("user=alice"))
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		began := time.Now()
		if _, err := svc.client.ShouldRateLimit(context.Background(), small); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(began))
	}
	b.StopTimer()
	stop()
	wg.Wait()
	hc.CloseIdleConnections()
	slices.Sort(latencies)
	at := func(q float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.5), "small-p50-ms")
	b.ReportMetric(at(0.99), "small-p99-ms")
	b.ReportMetric(at(1), "small-max-ms")
	b.ReportMetric(float64(posted.Load()), "json-bodies")
	b.ReportMetric(float64(busy.Load()), "json-429")
}
