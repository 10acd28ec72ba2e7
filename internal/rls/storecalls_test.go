package rls_test

import (
	"math"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

const callsConfig = `domain: calls
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// callsService starts the service of callsConfig on a fake-clock memstore
// behind a recording faultstore.
func callsService(t *testing.T) (*service, *faultstore.Store) {
	t.Helper()
	ms := memstore.New(memstore.Options{Now: storetest.NewFakeClock().Now})
	t.Cleanup(func() { ms.Close() })
	fs := faultstore.New(ms)
	return start(t, setup{yaml: callsConfig, store: fs}), fs
}

// wantStatus checks that st reports the store's result r on hit h, field
// by field: its limit, what is left (at least 0), and the time until the
// reset in whole seconds, rounded up.
func wantStatus(t *testing.T, i int, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, h floodgate.Hit, r floodgate.Result) {
	t.Helper()
	reset := int64(math.Ceil(r.ResetAfter.Seconds()))
	if st.GetCode() != code || int64(st.GetCurrentLimit().GetRequestsPerUnit()) != h.Rule.Limit ||
		int64(st.GetLimitRemaining()) != max(r.Remaining, 0) || st.GetDurationUntilReset().GetSeconds() != reset {
		t.Errorf("status %d = %v; want %v, limit %d, %d left, reset %ds: the store's answer", i, st, code, h.Rule.Limit, max(r.Remaining, 0), reset)
	}
}

// A request of takes reaches the store in one Take of all its hits, and
// each status reports that Take's result on its hit. A request with a
// peek adds one Peek, of the peek.
func TestRequestCallsTheStoreOnceWithEveryHit(t *testing.T) {
	svc, fs := callsService(t)
	for n := range 4 {
		fs.Record()
		resp := svc.call(t, req("calls", desc("user=a"), desc("ip=192.0.2.1")))
		calls := fs.Recorded()
		if len(calls) != 1 || calls[0].Peek || len(calls[0].Hits) != 2 || len(calls[0].Results) != 2 {
			t.Fatalf("request %d: store calls %+v; want one Take of both hits", n, calls)
		}
		c := calls[0]
		user, ip := 0, 1
		if c.Hits[0].Rule.Limit == 3 {
			user, ip = 1, 0
		}
		if c.Hits[user].Key == c.Hits[ip].Key || c.Hits[user].Rule.Limit != 5 || c.Hits[ip].Rule.Limit != 3 {
			t.Fatalf("request %d: hits %+v; want user's 5/min and ip's 3/min", n, c.Hits)
		}
		code, overall := ok, ok
		if n == 3 { // ip's fourth: denied, and nothing taken
			code, overall = over, over
		}
		if resp.GetOverallCode() != overall {
			t.Errorf("request %d: overall %v, want %v", n, resp.GetOverallCode(), overall)
		}
		u := c.Results[user]
		if n == 3 {
			u.Remaining++ // within its limit, but not recorded: the key as it stands
		}
		wantStatus(t, 0, resp.GetStatuses()[0], ok, c.Hits[user], u)
		wantStatus(t, 1, resp.GetStatuses()[1], code, c.Hits[ip], c.Results[ip])
	}

	fs.Record()
	resp := svc.call(t, req("calls", peekDesc("user=a"), desc("ip=192.0.2.2")))
	calls := fs.Recorded()
	if len(calls) != 2 || !calls[0].Peek || len(calls[0].Hits) != 1 || calls[0].Hits[0].Rule.Limit != 5 || calls[1].Peek || len(calls[1].Hits) != 1 || calls[1].Hits[0].Rule.Limit != 3 {
		t.Fatalf("peek and take: store calls %+v; want a Peek of user's hit, then a Take of ip's", calls)
	}
	if resp.GetOverallCode() != ok {
		t.Errorf("peek and take: overall %v, want OK", resp.GetOverallCode())
	}
	// The peek's figures are the key's as it stands: the store's answer
	// is after one more request, which the peek did not take.
	peeked := calls[0].Results[0]
	peeked.Remaining++
	wantStatus(t, 0, resp.GetStatuses()[0], ok, floodgate.Hit{Rule: floodgate.Rule{Limit: 5}}, peeked)
	wantStatus(t, 1, resp.GetStatuses()[1], ok, calls[1].Hits[0], calls[1].Results[0])
}

// A request of several descriptors, one of them a peek (hits_addend 0),
// one blocked (requests_per_unit 0) and one counted, is over the limit
// for the blocked one: the peek and the counted one report their keys as
// they stand, the blocked one a whole window over, and nothing is
// recorded. The store is asked twice, as before: a Peek of the peek,
// then one of the counted hit for its figures.
func TestPeekBlockedAndCountedDescriptors(t *testing.T) {
	svc, fs := callsService(t)
	for range 2 {
		svc.call(t, req("calls", desc("user=a"), desc("ip=192.0.2.1")))
	}
	fs.Record()
	for range 2 { // the same answer twice: the first recorded nothing
		resp := svc.call(t, req("calls", peekDesc("user=a"), desc("blocked=x"), desc("ip=192.0.2.1")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{ok, over, ok}, []uint32{3, 0, 1})
		for i, want := range []uint32{5, 0, 3} {
			if got := resp.GetStatuses()[i].GetCurrentLimit().GetRequestsPerUnit(); got != want {
				t.Errorf("status %d: requests_per_unit %d, want %d", i, got, want)
			}
		}
		if got := resp.GetStatuses()[1].GetDurationUntilReset().GetSeconds(); got != 60 {
			t.Errorf("blocked status: duration_until_reset %ds, want 60", got)
		}
	}
	calls := fs.Recorded()
	if len(calls) != 4 {
		t.Fatalf("store calls %+v; want two Peeks per request", calls)
	}
	for i, c := range calls {
		if want := []int64{5, 3}[i%2]; !c.Peek || len(c.Hits) != 1 || c.Hits[0].Rule.Limit != want {
			t.Errorf("store call %d %+v; want a Peek of the %d/min limit's hit", i, c, want)
		}
	}
	expect(t, svc.call(t, req("calls", desc("ip=192.0.2.1"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
}
