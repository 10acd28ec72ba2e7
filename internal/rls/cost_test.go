package rls_test

import (
	"fmt"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// Envoy Gateway's rate limiting with cost (Envoy AI Gateway's token
// budgets): a check on the request (hits_addend 0), a charge of the
// response's cost when its stream ends (hits_addend N). With hits that
// count over their limits, as envoyproxy/ratelimit counts by default, the
// flow answers exactly as upstream's does, measured side by side in issue
// 26; with floodgate's default, a charge past what is left records
// nothing (a denied request records nothing), and the budget is never
// spent once a response outgrows it.
func TestCostFlow(t *testing.T) {
	const config = `
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	for _, c := range []struct {
		name  string
		yaml  string
		over  bool // Options.CountOverLimit
		steps string
		redis bool
	}{
		{"upstream's counting, on Redis", config, true,
			"check OK(100), +40 OK(60), check OK(60), +40 OK(20), check OK(20), +40 OVER_LIMIT(0), check OVER_LIMIT(0)", true},
		{"upstream's counting, service-wide", config, true,
			"check OK(100), +40 OK(60), check OK(60), +40 OK(20), check OK(20), +40 OVER_LIMIT(0), check OVER_LIMIT(0)", false},
		{"upstream's counting, from the domain", config + "count_over_limit: true\n", false,
			"check OK(100), +40 OK(60), check OK(60), +40 OK(20), check OK(20), +40 OVER_LIMIT(0), check OVER_LIMIT(0)", false},
		{"floodgate's default", config, false,
			"check OK(100), +40 OK(60), check OK(60), +40 OK(20), check OK(20), +40 OVER_LIMIT(20), check OK(20)", false},
		{"the domain keeps floodgate's", config + "count_over_limit: false\n", true,
			"check OK(100), +40 OK(60), check OK(60), +40 OK(20), check OK(20), +40 OVER_LIMIT(20), check OK(20)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var store floodgate.Store = memstore.New(memstore.Options{})
			if c.redis {
				store = freshRedis(t)
			}
			svc := start(t, setup{yaml: c.yaml, store: store, countOver: c.over})
			var got []string
			for _, step := range strings.Split(c.steps, ", ") {
				d := desc("user=ana")
				name := "check"
				if strings.HasPrefix(step, "+40") {
					d.HitsAddend, name = wrapperspb.UInt64(40), "+40"
				} else {
					d.HitsAddend = wrapperspb.UInt64(0)
				}
				resp := svc.call(t, req("ai", d))
				got = append(got, fmt.Sprintf("%s %v(%d)", name, resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()))
			}
			if g := strings.Join(got, ", "); g != c.steps {
				t.Errorf("flow:\n got %s\nwant %s", g, c.steps)
			}
		})
	}
	// At the limit exactly, a check is within it, with nothing left.
	svc := start(t, setup{yaml: config, store: memstore.New(memstore.Options{}), countOver: true})
	d := desc("user=bo")
	d.HitsAddend = wrapperspb.UInt64(100)
	expect(t, svc.call(t, req("ai", d)), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	d.HitsAddend = wrapperspb.UInt64(0)
	expect(t, svc.call(t, req("ai", d)), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
	d.HitsAddend = wrapperspb.UInt64(1)
	expect(t, svc.call(t, req("ai", d)), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
	d.HitsAddend = wrapperspb.UInt64(0)
	expect(t, svc.call(t, req("ai", d)), over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
}

// TestHitsAddendDebtBounded: under count_over_limit (an over-limit hit is
// recorded, a debt the key works off), one hits_addend of 2^51 on a token
// bucket must not lock the key for ten years (Retry-After: 315360001).
// A key owes at most its capacity (floodgate.Hit.Overdraw): for 60 a
// minute, a token a second, the bucket's TAT runs at most a full bucket's
// refill (60 s) past a full bucket's, so a request of 1 fits again in 61 s
// and the bucket is full again in 120 s; further hits hold it there, and
// memstore and Redis answer alike.
func TestHitsAddendDebtBounded(t *testing.T) {
	const config = `
domain: debt
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket}
`
	for _, redis := range []bool{false, true} {
		var store floodgate.Store = memstore.New(memstore.Options{})
		if redis {
			store = freshRedis(t)
		}
		svc := start(t, setup{yaml: config, store: store, countOver: true})
		for i, n := range []uint64{1 << 51, 1, 1 << 51} {
			d := desc("user=ana")
			d.HitsAddend = wrapperspb.UInt64(n)
			resp := svc.call(t, req("debt", d))
			st := resp.GetStatuses()[0]
			reset := st.GetDurationUntilReset().GetSeconds()
			if resp.GetOverallCode() != over || header(resp, "Retry-After") != "61" || reset < 119 || reset > 120 || st.GetLimitRemaining() != 0 {
				t.Fatalf("redis %v, hit %d of %d: %v, Retry-After %q, duration_until_reset %ds; want OVER_LIMIT, Retry-After 61, 120s to reset (a debt of 60, the capacity)",
					redis, i, n, resp, header(resp, "Retry-After"), reset)
			}
		}
	}
}
