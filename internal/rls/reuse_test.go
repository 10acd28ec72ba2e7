package rls_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/memstore"
)

// TestNothingCarriesOver: a Server reuses one request's working memory
// for the next, and no answer may show it. Two services on stores with
// one fixed clock answer the same requests; the second also answers,
// before each of them, requests that leave every mark a request can
// leave and record nothing: over the limit (a blocked descriptor), peeks
// of the very keys the others count, more distinct hits than a scan
// finds among, duplicates, unlimited descriptors. Their answers to the
// shared requests must be equal. The calls go to the Server directly, one
// after another, so that it reuses the memory it just released.
func TestNothingCarriesOver(t *testing.T) {
	yaml := "domain: a\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
		"  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n" +
		"  - key: blocked\n    rate_limit: {unit: minute, requests_per_unit: 0}\n" +
		"  - key: open\n"
	at := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	svc := func() *service {
		return start(t, setup{yaml: yaml, store: memstore.New(memstore.Options{Now: func() time.Time { return at }})})
	}
	plain, tainted := svc(), svc()

	taints := []*rlsv3.RateLimitRequest{
		req("a", desc("blocked=x"), desc("user=alice"), desc("open=1")),
		req("a", peekDesc("user=alice"), peekDesc("user=bob"), peekDesc("ip=192.0.2.1"), peekDesc("user=alice")),
	}
	many := req("a", desc("blocked=x"))
	for i := range 12 {
		many.Descriptors = append(many.Descriptors, peekDesc("user=u"+strconv.Itoa(i)), desc("ip=192.0.2."+strconv.Itoa(i)))
	}
	many.Descriptors = append(many.Descriptors, peekDesc("user=alice"), desc("user=carol"), desc("user=carol"))
	taints = append(taints, many)

	shared := []*rlsv3.RateLimitRequest{
		req("a", desc("user=alice")),
		req("a", desc("user=alice"), desc("ip=192.0.2.1")),
		req("a", peekDesc("user=alice")),
		req("a", desc("open=1")),
		req("a", desc("user=alice"), desc("user=alice")), // over: 2 more than the 1 left
		req("a", desc("user=bob"), desc("ip=192.0.2.1"), desc("open=2")),
		req("a", peekDesc("user=u3"), desc("user=carol")),
		req("a", desc("user=carol")),
	}
	ctx := context.Background()
	for i, r := range shared {
		want, werr := plain.srv.ShouldRateLimit(ctx, r)
		for _, tr := range taints {
			res, err := tainted.srv.ShouldRateLimit(ctx, tr)
			if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT && tr != taints[1] {
				t.Fatalf("a tainting request: %v, %v; want OVER_LIMIT", res, err)
			}
		}
		got, gerr := tainted.srv.ShouldRateLimit(ctx, r)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("request %d: error %v after other requests, %v without", i, gerr, werr)
		}
		if !proto.Equal(want, got) {
			t.Errorf("request %d: a request's answer depends on the requests before it:\nalone:        %v\nafter others: %v", i, prototext.Format(want), prototext.Format(got))
		}
	}
}
