package rls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestFailureStatuses: with the store failing at once, each descriptor's
// status shows its own failure mode: closed over the limit until the
// Retry-After, open and error passing without figures or current_limit,
// local with the local limits' figures.
func TestFailureStatuses(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: outageConfig, store: fs})
	fs.Set(faultstore.Fail)
	for _, c := range []struct {
		name      string
		ds        []*commonv3.RateLimitDescriptor
		overall   rlsv3.RateLimitResponse_Code
		codes     []rlsv3.RateLimitResponse_Code
		remaining []uint32
	}{
		// The local limit is 3 an hour: the first local decision leaves 2.
		{"local alone", []*commonv3.RateLimitDescriptor{desc("local=a")}, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{2}},
		// Local and open: the local limits decide the local hit only.
		{"local and open", []*commonv3.RateLimitDescriptor{desc("local=a"), desc("open=a")}, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{1, 0}},
		// The other order: the local decision still goes to the local hit.
		{"open and local", []*commonv3.RateLimitDescriptor{desc("open=a"), desc("local=b")}, ok, []rlsv3.RateLimitResponse_Code{ok, ok}, []uint32{0, 2}},
		{"closed and open", []*commonv3.RateLimitDescriptor{desc("open=b"), desc("closed=b")}, over, []rlsv3.RateLimitResponse_Code{ok, over}, []uint32{0, 0}},
		{"closed and error", []*commonv3.RateLimitDescriptor{desc("err=b"), desc("closed=b")}, over, []rlsv3.RateLimitResponse_Code{ok, over}, []uint32{0, 0}},
		{"override keeps the descriptor's mode", []*commonv3.RateLimitDescriptor{override(desc("closed=c"))}, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0}},
		{"override of an unlimited descriptor keeps its mode", []*commonv3.RateLimitDescriptor{override(desc("free=c"))}, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0}},
		{"override of an open descriptor", []*commonv3.RateLimitDescriptor{override(desc("open=c"))}, ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := svc.call(t, req("out", c.ds...))
			expect(t, resp, c.overall, c.codes, c.remaining)
			for i, st := range resp.GetStatuses() {
				// A current_limit only where a limit decided: the local
				// limits, or the failure mode closed, with nothing left
				// until the Retry-After (see the package doc).
				decided := c.ds[i].GetEntries()[0].GetKey() == "local" || st.GetCode() == over
				if (st.GetCurrentLimit() != nil) != decided {
					t.Errorf("status %d: current_limit %v, want one: %v", i, st.GetCurrentLimit(), decided)
				}
				if st.GetCode() == over && st.GetDurationUntilReset().AsDuration() != 5*time.Second {
					t.Errorf("status %d: fail-closed with duration_until_reset %v, want the Retry-After's 5s", i, st.GetDurationUntilReset())
				}
			}
			if ra := header(resp, "Retry-After"); (c.overall == over) != (ra == "5") {
				t.Errorf("Retry-After %q", ra)
			}
		})
	}
	// A descriptor the configuration does not know, overridden: the
	// default mode, error.
	_, err := svc.client.ShouldRateLimit(context.Background(), req("out", override(desc("zzz=1"))))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("an override of an unconfigured descriptor with the store down: %v, want Unavailable", err)
	}
}

func override(d *commonv3.RateLimitDescriptor) *commonv3.RateLimitDescriptor {
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// TestDeadline: a caller whose deadline passes first gets its context's
// code, not a failure mode's answer.
func TestDeadline(t *testing.T) {
	fs := faultstore.New(memstore.New(memstore.Options{}))
	svc := start(t, setup{yaml: outageConfig, store: fs, timeout: 5 * time.Second})
	fs.Set(faultstore.Hang)
	for _, ds := range [][]*commonv3.RateLimitDescriptor{{desc("open=d")}, {peekDesc("open=d")}} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := svc.srv.ShouldRateLimit(ctx, req("out", ds...))
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%v: %v, want DeadlineExceeded", ds, err)
		}
	}
}

// TestMetricFigures: near_limit counts, as envoyproxy/ratelimit does, the
// hits that leave a limit above floor(80%) used, and requests_total
// counts the answers.
func TestMetricFigures(t *testing.T) {
	svc := start(t, setup{yaml: "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", store: memstore.New(memstore.Options{})})
	labels := map[string]string{"domain": "m", "limit": "m.k", "descriptor": ""}
	near := func() float64 { return counter(t, svc.reg, "floodgate_rls_near_limit_total", labels) }
	for range 8 {
		svc.call(t, req("m", desc("k=v")))
	}
	if near() != 0 {
		t.Errorf("near_limit %v after 8 of 10, want 0 (upstream: above the threshold of 8)", near())
	}
	svc.call(t, req("m", desc("k=v")))
	if near() != 1 {
		t.Errorf("near_limit %v after 9 of 10, want 1", near())
	}
	for range 3 {
		svc.call(t, req("m", desc("k=v")))
	}
	for name, want := range map[string]float64{"floodgate_rls_near_limit_total": 2, "floodgate_rls_within_limit_total": 10, "floodgate_rls_over_limit_total": 2, "floodgate_rls_total_hits_total": 12} {
		if got := counter(t, svc.reg, name, labels); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// envoyproxy/ratelimit's NEAR_LIMIT_RATIO, 0.5: near above 5 of 10.
	half := start(t, setup{yaml: "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", store: memstore.New(memstore.Options{}), near: 0.5})
	for range 6 {
		half.call(t, req("m", desc("k=v")))
	}
	if got := counter(t, half.reg, "floodgate_rls_near_limit_total", labels); got != 1 {
		t.Errorf("near_limit %v after 6 of 10 with a ratio of 0.5, want 1 (the 6th)", got)
	}
	// Several hits at once count in part, as upstream's: of 7 then 5 on
	// a limit of 10, the 5 are denied, 2 of them over the limit and 2
	// between the threshold (8) and the limit; then 4 of 10 and 5 more,
	// within, 1 of them near.
	multi := start(t, setup{yaml: "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", store: memstore.New(memstore.Options{})})
	hits := func(key string, n uint32) {
		r := req("m", desc("k="+key))
		r.HitsAddend = n
		multi.call(t, r)
	}
	hits("a", 7)
	hits("a", 5)
	hits("b", 4)
	hits("b", 5)
	for name, want := range map[string]float64{"floodgate_rls_near_limit_total": 2 + 1, "floodgate_rls_within_limit_total": 7 + 9, "floodgate_rls_over_limit_total": 2, "floodgate_rls_total_hits_total": 21} {
		if got := counter(t, multi.reg, name, labels); got != want {
			t.Errorf("with several hits at once: %s = %v, want %v", name, got, want)
		}
	}
	for code, want := range map[string]float64{"ok": 10, "over_limit": 2} {
		if got := counter(t, svc.reg, "floodgate_rls_requests_total", map[string]string{"code": code}); got != want {
			t.Errorf("requests_total{code=%q} = %v, want %v", code, got, want)
		}
	}
}

// TestBoundsAccepted: the largest request within each bound is decided.
func TestBoundsAccepted(t *testing.T) {
	svc := start(t, setup{yaml: invalidConfig, store: memstore.New(memstore.Options{})})
	many := make([]*commonv3.RateLimitDescriptor, rls.MaxDescriptors)
	for i := range many {
		many[i] = desc("other=x")
	}
	svc.call(t, req("inv", many...))
	deep := desc()
	for range rls.MaxEntries {
		deep.Entries = append(deep.Entries, desc("k=v").Entries...)
	}
	svc.call(t, req("inv", deep))
	log := desc("log=a")
	log.HitsAddend = wrapperspb.UInt64(100) // the most one sliding-window hit costs
	expect(t, svc.call(t, req("inv", log)), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{4900})
	big := desc("user=a")
	big.HitsAddend = wrapperspb.UInt64(1<<63 - 1)
	resp, err := svc.client.ShouldRateLimit(context.Background(), req("inv", big))
	if err != nil || resp.GetOverallCode() != over {
		t.Errorf("hits_addend 2^63-1: %v, %v; want OVER_LIMIT", resp.GetOverallCode(), err)
	}
	// A key of exactly floodgate's bound ("inv/user=" and the value) is
	// decided; one byte more is decided under its digest, apart from the
	// first; and so are values whose key (escaped: "/" is "%2F") is over
	// the bound, though the request is not. Each is counted on its own.
	value := strings.Repeat("v", bounds.KeyLen-len("inv/user="))
	slashes := "user=" + strings.Repeat("/", 400_000)
	for _, c := range []struct {
		req  *rlsv3.RateLimitRequest
		left uint32
	}{
		{req("inv", desc("user="+value)), 9},
		{req("inv", desc("user="+value+"v")), 9},
		{req("inv", desc("user="+value+"v")), 8},
		{req("inv", desc(slashes)), 9},
		{req("inv", desc(slashes+"x")), 9},
		{req("inv", desc(slashes)), 8},
	} {
		expect(t, mustDecide(t, svc, c.req), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{c.left})
	}
}

// TestHeadersOncePerHit: identical descriptors share one hit, and it is
// one member of each field.
func TestHeadersOncePerHit(t *testing.T) {
	svc := start(t, setup{yaml: featureConfig, store: memstore.New(memstore.Options{})})
	resp := svc.call(t, req("feat", desc("plain=h"), desc("plain=h"), desc("path=web")))
	for _, field := range []string{"RateLimit-Policy", "RateLimit"} {
		if n := strings.Count(header(resp, field), `"feat.`); n != 2 {
			t.Errorf("%s %q: %d members, want 2 (one per distinct hit)", field, header(resp, field), n)
		}
	}
}

// mustDecide calls the Server in process (no gRPC message bound).
func mustDecide(t *testing.T, svc *service, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := svc.srv.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
