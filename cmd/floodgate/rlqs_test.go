package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeRLQS: the service answers Envoy's rate_limit_quota stream on
// its gRPC listener, from the configuration directory RLS reads and with
// its shares in REDIS_URL's Redis: a limited bucket gets a token bucket
// of its share, a limit of 0 deny-all, an unconfigured bucket allow-all;
// /metrics counts the reports.
func TestServeRLQS(t *testing.T) {
	dir := t.TempDir()
	yaml := "domain: edge\ndescriptors:\n  - key: route\n    value: api\n    rate_limit: {unit: second, requests_per_unit: 100}\n" +
		"  - key: route\n    value: closed\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, map[string]string{"REDIS_URL": "redis://" + redistest.Addr(t), "CACHE_KEY_PREFIX": testPrefix(t)}, "-config-dir", dir)
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	usage := func(route string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"route": route}}, NumRequestsAllowed: 3, NumRequestsDenied: 1}
	}
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage("api"), usage("closed"), usage("other")}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{}
	for len(got) < 3 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.GetBucketAction() {
			got[a.GetBucketId().GetBucket()["route"]] = a
		}
	}
	tb := got["api"].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	// Alone, before a measured report: the whole limit of 100/s, less two
	// bursts of 2 tokens (the package doc's footprint), for a short TTL.
	if tb.GetTokensPerFill().GetValue() != 96 || tb.GetFillInterval().AsDuration() != time.Second || tb.GetMaxTokens() != 2 {
		t.Errorf("api: %v, want 96 tokens per 1s, 2 at most", tb)
	}
	if ttl := got["api"].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("api: TTL %v, want above 0 and at most the default 2s", ttl)
	}
	if b := got["closed"].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); b != typev3.RateLimitStrategy_DENY_ALL {
		t.Errorf("closed: %v, want DENY_ALL", got["closed"])
	}
	if b := got["other"].GetQuotaAssignmentAction(); b.GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL || b.GetAssignmentTimeToLive() != nil {
		t.Errorf("other: %v, want ALLOW_ALL without TTL", got["other"])
	}
	res, err := http.Get("http://" + r.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`floodgate_rlqs_requests_total{limit="edge.route_api",result="allowed"} 3`, `floodgate_rlqs_requests_total{limit="edge.route_api",result="denied"} 1`, "floodgate_rlqs_streams 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The shutdown ends the open stream (Unavailable) rather than waiting
	// SHUTDOWN_TIMEOUT (10s) for it.
	start := time.Now()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not stop within 5s with an RLQS stream open")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("serve took %v to stop with an RLQS stream open", took)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("the stream ended with %v, want Unavailable", err)
			}
			break
		}
	}
	r.done <- 0 // for startServe's cleanup
}
