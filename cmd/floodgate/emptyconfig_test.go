package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEmptyConfigDirectory: removing the last configuration file would
// reload to zero limits, every request then OK. The service refuses it (the limits in force keep deciding, the
// refusal logged and counted as a failed load) unless CONFIG_ALLOW_EMPTY
// is true, when the reload goes through and is logged at WARN.
func TestEmptyConfigDirectory(t *testing.T) {
	for _, allow := range []bool{false, true} {
		dir := t.TempDir()
		file := filepath.Join(dir, "d.yaml")
		if err := os.WriteFile(file, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{"CONFIG_DIR": dir}
		if allow {
			vars["CONFIG_ALLOW_EMPTY"] = "true"
		}
		r := startServe(t, vars)
		c := r.client(t)
		call := func() rlsv3.RateLimitResponse_Code {
			t.Helper()
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
				Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			return resp.GetOverallCode()
		}
		if got := call(); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("allow %v: the first request: %v, want OK", allow, got)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		want, code, loads := "rate-limit configuration refused: the directory holds no configuration file", rlsv3.RateLimitResponse_OVER_LIMIT, "floodgate_config_load_error_total 1"
		if allow {
			want, code, loads = "the rate-limit configuration reloaded drops limits that were in force", rlsv3.RateLimitResponse_OK, "floodgate_config_load_dropped_total 1"
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(r.logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("allow %v: no log %q within 10s:\n%s", allow, want, r.logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := call(); got != code {
			t.Fatalf("allow %v: a request once the directory is empty: %v, want %v", allow, got, code)
		}
		if _, body := get(t, "http://"+r.http+"/metrics"); !strings.Contains(body, "\n"+loads+"\n") {
			t.Fatalf("allow %v: /metrics has no %q", allow, loads)
		}
	}
}
