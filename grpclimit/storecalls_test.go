package grpclimit_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A call reaches the store in one Take of all its limits' hits, and its
// metadata and status details report that Take's results, which are
// what enforce decided (the handler's Result): each limit's remaining and
// reset, and a denial's retry delay. A denied call recorded nothing: a
// hit within its limit then reports the key as it stands.
func TestCallCallsTheStoreOnceWithEveryHit(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{
			{Rule: rule(t, "ip", 5, 10*time.Second), Key: grpclimit.ClientIP(nil)},
			{Rule: rule(t, "user", 2, 10*time.Second), Key: grpclimit.Principal},
		}},
	}})
	secs := func(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
	alice := withMD(userKey, "alice")
	for n := range 3 {
		e.fault.Record()
		a := empty(t, c, alice)
		calls := e.fault.Recorded()
		if len(calls) != 1 || calls[0].Peek || len(calls[0].Hits) != 2 || len(calls[0].Results) != 2 ||
			calls[0].Hits[0].Rule.Name != "ip" || calls[0].Hits[1].Rule.Name != "user" || calls[0].Hits[1].Key != "alice" {
			t.Fatalf("call %d: store calls %+v; want one Take of ip's and user's hits", n, calls)
		}
		rs := calls[0].Results
		denied := n == 2
		if denied {
			rs[0].Remaining++ // within its limit, but not recorded: the key as it stands
		}
		want := fmt.Sprintf(`"ip";r=%d;t=%d, "user";r=%d;t=%d`, rs[0].Remaining, secs(rs[0].ResetAfter), rs[1].Remaining, secs(rs[1].ResetAfter))
		if got := a.field(t, grpclimit.MetadataRateLimit); got != want {
			t.Errorf("call %d: ratelimit %q, want %q", n, got, want)
		}
		if denied {
			if a.st.Code() != codes.ResourceExhausted || a.retry != rs[1].RetryAfter {
				t.Errorf("call %d: %v, RetryInfo %v; want ResourceExhausted and the user's %v", n, a.err, a.retry, rs[1].RetryAfter)
			}
			continue
		}
		r := svc.last(t)
		if a.err != nil || !r.ok || len(r.res.Decision.Each) != 2 || len(r.res.Each) != 2 {
			t.Fatalf("call %d: %v, the handler found %+v; want two decisions", n, a.err, r)
		}
		for i, d := range r.res.Decision.Each {
			if v := r.res.Each[i]; !d.Allowed || d.Remaining != rs[i].Remaining || d.ResetAfter != rs[i].ResetAfter || v.Decision.Policy == "" || v.Decision.Remaining != d.Remaining || v.Hit.Rule != calls[0].Hits[i].Rule {
				t.Errorf("call %d: decision %d %+v, verdict %+v; want the store's result %+v", n, i, d, v, rs[i])
			}
		}
	}
}
