package httplimit_test

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// A request reaches the store in one Take of all its limits' hits, and
// its fields report that Take's results, which are what enforce decided
// (the handler's Result): each limit's remaining and reset, the worst's
// legacy fields, and a denial's Retry-After. A denied request recorded
// nothing: a hit within its limit then reports the key as it stands.
func TestRequestCallsTheStoreOnceWithEveryHit(t *testing.T) {
	e := newEnv(t, envOptions{})
	var seen httplimit.Result
	mw, err := e.hl.Middleware(httplimit.Route{Limits: []httplimit.Limit{
		{Rule: rule(t, "ip", 5, 10*time.Second), Key: httplimit.ClientIP(nil)},
		{Rule: rule(t, "acct", 2, 10*time.Second), Key: httplimit.Header("X-Account")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen, _ = httplimit.FromContext(r.Context()) }))
	secs := func(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
	for n := range 3 {
		e.fault.Record()
		seen = httplimit.Result{}
		rec := do(h, "192.0.2.1:1234", "X-Account", "42")
		calls := e.fault.Recorded()
		if len(calls) != 1 || calls[0].Peek || len(calls[0].Hits) != 2 || len(calls[0].Results) != 2 ||
			calls[0].Hits[0].Rule.Name != "ip" || calls[0].Hits[0].Key != "192.0.2.1" || calls[0].Hits[1].Rule.Name != "acct" || calls[0].Hits[1].Key != "42" {
			t.Fatalf("request %d: store calls %+v; want one Take of ip's and acct's hits", n, calls)
		}
		rs := calls[0].Results
		denied := n == 2
		if denied {
			rs[0].Remaining++ // within its limit, but not recorded: the key as it stands
		}
		want := fmt.Sprintf(`"ip";r=%d;t=%d, "acct";r=%d;t=%d`, rs[0].Remaining, secs(rs[0].ResetAfter), rs[1].Remaining, secs(rs[1].ResetAfter))
		if got := rec.Header().Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %s, want %s", n, got, want)
		}
		worst := rs[1] // acct's: the fewest left, or the denial
		for name, want := range map[string]string{
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": fmt.Sprint(worst.Remaining), "X-RateLimit-Reset": fmt.Sprint(secs(worst.ResetAfter)),
		} {
			if got := rec.Header().Get(name); got != want {
				t.Errorf("request %d: %s %q, want %q", n, name, got, want)
			}
		}
		if !denied {
			each := seen.Decision.Each
			if rec.Code != http.StatusOK || len(each) != 2 || len(seen.Each) != 2 {
				t.Fatalf("request %d: %d, Result %+v; want 200 with two decisions", n, rec.Code, seen.Result)
			}
			for i, d := range each {
				if v := seen.Each[i]; !d.Allowed || d.Remaining != rs[i].Remaining || d.ResetAfter != rs[i].ResetAfter || v.Decision.Policy == "" || v.Decision.Remaining != d.Remaining || v.Hit.Rule != calls[0].Hits[i].Rule {
					t.Errorf("request %d: decision %d %+v, verdict %+v; want the store's result %+v", n, i, d, v, rs[i])
				}
			}
			continue
		}
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != fmt.Sprint(secs(worst.RetryAfter)) {
			t.Errorf("request %d: %d, Retry-After %q; want 429 and %d", n, rec.Code, rec.Header().Get("Retry-After"), secs(worst.RetryAfter))
		}
	}
	if c := e.fault.Calls(); c != 3 {
		t.Errorf("%d store calls for 3 requests, want 3", c)
	}
}
