package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

var evalshaCalls = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`)

// TestServeEscrow: with ESCROW_PERIOD, a hot descriptor is decided from
// leases of its quota: far fewer script calls than requests, and exactly
// its limit admitted. Without it, a script call each. A period out of
// floodgate's bounds is refused at start.
func TestServeEscrow(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "e.yaml"), []byte("domain: e\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1500}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const requests = 2000
	for _, period := range []string{"", "200ms"} {
		redis := redistest.Start(t)
		vars := map[string]string{"REDIS_URL": redis.URL(), "CONFIG_DIR": dir}
		if period != "" {
			vars["ESCROW_PERIOD"] = period
		}
		c := startServe(t, vars).client(t)
		calls := func() int {
			stats, err := redistest.Command(redis.Addr(), "INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			m := evalshaCalls.FindStringSubmatch(stats)
			if m == nil {
				return 0
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		before := calls()
		ok := 0
		for range requests {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "e", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		used := calls() - before
		if ok != 1500 {
			t.Errorf("ESCROW_PERIOD=%q: %d of %d admitted, want the limit, 1500", period, ok, requests)
		}
		switch {
		case period == "" && used < requests:
			t.Errorf("without escrow: %d script calls for %d requests, want one each", used, requests)
		case period != "" && used > requests/10:
			t.Errorf("ESCROW_PERIOD=%s: %d script calls for %d requests, want at most a tenth", period, used, requests)
		}
		t.Logf("ESCROW_PERIOD=%q: %d script calls for %d requests, %d admitted", period, used, requests, ok)
	}
	var errs strings.Builder
	vars := map[string]string{"CONFIG_DIR": dir, "ESCROW_PERIOD": "5s", "GRPC_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0"}
	if code := serve(context.Background(), nil, env(vars), &errs, serveHooks{}); code != 2 || !strings.Contains(errs.String(), "ESCROW_PERIOD: ") {
		t.Errorf("ESCROW_PERIOD=5s: exit %d, %q; want exit 2 naming it", code, errs.String())
	}
}
