package rls_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A service on an in-memory store, with envoyproxy/ratelimit's YAML,
// asked as Envoy asks. A real one keeps its state in Redis and registers
// the Server on a grpc.Server (Register) and its Handler on HTTP, as
// cmd/floodgate does.
func Example() {
	dir, err := os.MkdirTemp("", "rls-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	yaml := `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(yaml), 0o644); err != nil {
		log.Fatal(err)
	}

	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		log.Fatal(err)
	}
	enf, err := enforce.New(enforce.Options{Limiter: limiter})
	if err != nil {
		log.Fatal(err)
	}
	defer enf.Close()
	srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: dir,
		// The headers envoyproxy/ratelimit adds under LIMIT_RESPONSE_HEADERS_ENABLED.
		Headers: rls.Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	request := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
	}}}
	for range 3 {
		resp, err := srv.ShouldRateLimit(context.Background(), request)
		if err != nil {
			log.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining())
	}

	// The same over HTTP, as envoyproxy/ratelimit's /json.
	web := httptest.NewServer(srv.Handler())
	defer web.Close()
	res, err := web.Client().Post(web.URL+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.2"}]}]}`))
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Status, res.Header.Get("RateLimit-Limit"), res.Header.Get("RateLimit-Remaining"))
	// Output:
	// OK 2 MINUTE 1
	// OK 2 MINUTE 0
	// OVER_LIMIT 2 MINUTE 0
	// 200 OK 2 1
}
