package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/breakerstore"
)

const floodConfig = `
domain: flood
descriptors:
  - key: user
    failure_mode: error
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: v
    failure_mode: error
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// One client's flood of 1 MiB requests (256 descriptors of 4 KB values)
// on its own connection switches limiting off for nobody: another
// client's small requests, on another connection, are decided, never
// answered Unavailable, and the store's circuit breaker never opens
// (issue 25, finding 1: every one of alice's requests got 503 "circuit
// breaker open", and failure_mode error descriptors answered Unavailable,
// which Envoy lets through). Scaled to a small machine: 48 flooding
// callers for 2 s, on real Redis behind a breaker, at the service's 50 ms
// budget (on the code before this round: 30 of 32 of alice's answers
// Unavailable, the breaker opened twice). Under the race detector, which
// slows the service several times over, it runs 12 callers at 150 ms: a
// check of the shedding code, too light to tell the old code from the
// new; the test command runs it at full scale, without -race. Latency and
// memory under the flood are not asserted here (no timed tests).
func TestFloodOfLargeRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2 s flood")
	}
	var opened atomic.Int64
	br, err := breakerstore.New(freshRedis(t), breakerstore.Options{Cooldown: time.Second,
		OnStateChange: func(_ string, _, to breakerstore.State) {
			if to == breakerstore.Open {
				opened.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	budget := 50 * time.Millisecond // the service's
	if raceEnabled {
		budget *= 3 // the race detector slows the service several times over
	}
	svc := start(t, setup{yaml: floodConfig, store: br, breaker: br, timeout: budget})
	flooder, err := grpc.NewClient(svc.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(2<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer flooder.Close()
	big := make([]*commonv3.RateLimitDescriptor, 256)
	for i := range big {
		big[i] = desc(fmt.Sprintf("v=%d-%s", i, strings.Repeat("x", 4000)))
	}
	flood := rlsv3.NewRateLimitServiceClient(flooder)
	// The request is encoded once: an attacker's CPU is its own, not the
	// service's, so the flooders here spend none on encoding.
	encoded, err := proto.Marshal(req("flood", big...))
	if err != nil {
		t.Fatal(err)
	}
	preEncoded := grpc.ForceCodec(encodedCodec(encoded))
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var floods atomic.Int64
	flooders := 48
	if raceEnabled {
		flooders = 12 // as much CPU as 48 without the race detector, or more
	}
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				flood.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}, preEncoded) // any answer: the flood's own fate is not the point
				floods.Add(1)
			}
		}()
	}
	var asked, failed int
	var errs []string
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := svc.client.ShouldRateLimit(cctx, req("flood", desc("user=alice")))
		cancel()
		asked++
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			failed++
			errs = append(errs, fmt.Sprint(resp.GetOverallCode(), err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	shed := counter(t, svc.reg, "floodgate_rls_shed_total", map[string]string{})
	t.Logf("flood: %d large requests (%v shed); alice: %d requests", floods.Load(), shed, asked)
	// The flood's decoding takes one CPU at most (the server's codec
	// decodes one large request at a time): alice's decisions keep the
	// other. Before it, about one in 30 missed its budget.
	if failed > 0 {
		t.Errorf("alice: %d of %d requests not OK under the flood: %v", failed, asked, errs)
	}
	if n := opened.Load(); n > 0 {
		t.Errorf("the breaker opened %d times under a flood that Redis answered", n)
	}
}

// encodedCodec sends one encoded message whatever it is given, and
// decodes answers as the proto codec does.
type encodedCodec []byte

func (c encodedCodec) Marshal(any) ([]byte, error) { return c, nil }
func (encodedCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (encodedCodec) Name() string { return "proto" }
