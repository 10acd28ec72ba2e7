package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeHealthFollowsRedis: with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION,
// the health checks fail while Redis is lost (the store's breaker open),
// as upstream's fail while its pool has no connection, and pass again
// once it answers; without it they pass through the outage.
func TestServeHealthFollowsRedis(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte("domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{true, false} {
		redis := redistest.Start(t)
		vars := map[string]string{"REDIS_URL": redis.URL(), "CONFIG_DIR": dir, "DECISION_TIMEOUT": "100ms"}
		if follow {
			vars["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"] = "true"
		}
		r := startServe(t, vars)
		conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		health, rl := healthpb.NewHealthClient(conn), rlsv3.NewRateLimitServiceClient(conn)
		state := func() (healthpb.HealthCheckResponse_ServingStatus, int, string) {
			res, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			hr, err := http.Get("http://" + r.http + "/healthcheck")
			if err != nil {
				t.Fatal(err)
			}
			defer hr.Body.Close()
			var b strings.Builder
			buf := make([]byte, 512)
			n, _ := hr.Body.Read(buf)
			b.Write(buf[:n])
			return res.GetStatus(), hr.StatusCode, b.String()
		}
		call := func() {
			rl.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "svc", Descriptors: []*commonv3.RateLimitDescriptor{{
				Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
		}
		call()
		if g, h, body := state(); g != healthpb.HealthCheckResponse_SERVING || h != http.StatusOK {
			t.Fatalf("follow=%v, Redis up: health %v, /healthcheck %d %q; want SERVING and 200", follow, g, h, body)
		}
		redis.Kill()
		for range 10 { // the breaker opens after a few failures
			call()
		}
		g, h, body := state()
		switch {
		case follow && (g != healthpb.HealthCheckResponse_NOT_SERVING || h != http.StatusServiceUnavailable || !strings.Contains(body, "Redis is lost")):
			t.Errorf("Redis lost: health %v, /healthcheck %d %q; want NOT_SERVING and 503 saying Redis is lost", g, h, body)
		case !follow && (g != healthpb.HealthCheckResponse_SERVING || h != http.StatusOK):
			t.Errorf("Redis lost, health not following it: health %v, /healthcheck %d; want SERVING and 200", g, h)
		}
		if !follow {
			continue
		}
		if err := redis.Restart(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			call() // the breaker's probe
			if g, h, _ := state(); g == healthpb.HealthCheckResponse_SERVING && h == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("health did not pass again within 10s of Redis's return")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := parseServe(nil, env(map[string]string{"CONFIG_DIR": dir, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"})); err == nil ||
		!strings.Contains(err.Error(), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: is true but REDIS_URL is empty") {
		t.Errorf("without Redis: %v, want it refused", err)
	}
}
