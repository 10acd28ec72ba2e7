package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
	"github.com/floodgate-rl/floodgate/memstore"
)

// FuzzRateLimitFields checks that whatever numbers a decision carries, the
// fields the middleware writes parse back (RFC 9651) to the decision's
// values, clamped to what a structured Integer can hold.
func FuzzRateLimitFields(f *testing.F) {
	f.Add(int64(10), int64(7), int64(42*time.Second), int64(60*time.Second), int64(3), int64(0))
	f.Add(int64(1), int64(-1), int64(-5), int64(time.Millisecond), int64(1<<62), int64(1))
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<40), int64(0), int64(1<<62))
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	lim, _ := floodgate.New(ms, floodgate.Options{})
	// sfInt clamps n to what a structured Integer holds (RFC 9651).
	sfInt := func(n int64) int64 { return min(max(n, 0), 999_999_999_999_999) }
	f.Fuzz(func(t *testing.T, limit, remaining, reset, window, remaining2, reset2 int64) {
		w := time.Duration(window)
		r1, err1 := floodgate.NewRule("a", limit, w, floodgate.SlidingWindow)
		r2, err2 := floodgate.NewRule("b.2", max(limit, 1), time.Second, floodgate.SlidingWindow)
		if err1 != nil || err2 != nil {
			return
		}
		en, err := enforce.New(enforce.Options{Limiter: lim, Local: lim}) // each input is a process of its own
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(Options{Enforcer: en})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := l.build(Route{Limits: []Limit{{Rule: r1, Key: Principal}, {Rule: r2, Key: Principal}}})
		if err != nil {
			t.Fatal(err)
		}
		d := floodgate.Decision{Each: []floodgate.Decision{
			{Policy: "a", Limit: limit, Window: w, Remaining: remaining, ResetAfter: time.Duration(reset)},
			{Policy: "b.2", Limit: r2.Limit, Window: time.Second, Remaining: remaining2, ResetAfter: time.Duration(reset2)},
		}}
		d.Policy, d.Limit, d.Remaining, d.ResetAfter = "a", limit, remaining, time.Duration(reset)
		h := http.Header{}
		rt.writeQuota(h, d)
		pol, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy"))
		if err != nil || len(pol) != 2 {
			t.Fatalf("RateLimit-Policy %q: %v", h.Values("RateLimit-Policy"), err)
		}
		rl, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
		if err != nil || len(rl) != 2 {
			t.Fatalf("RateLimit %q: %v", h.Values("RateLimit"), err)
		}
		for i, e := range d.Each {
			p, q := pol[i].(httpsfv.Item), rl[i].(httpsfv.Item)
			if p.Value != e.Policy || q.Value != e.Policy {
				t.Fatalf("member %d names %v and %v, want %s", i, p.Value, q.Value, e.Policy)
			}
			for _, c := range []struct {
				params *httpsfv.Params
				key    string
				want   int64
			}{
				{p.Params, "q", sfInt(e.Limit)},
				{p.Params, "w", max(1, fields.Seconds(e.Window))},
				{q.Params, "r", sfInt(e.Remaining)},
				{q.Params, "t", fields.Seconds(e.ResetAfter)},
			} {
				if got, _ := c.params.Get(c.key); got != c.want {
					t.Fatalf("member %d: %s=%v, want %d (fields %v %v)", i, c.key, got, c.want, h.Values("RateLimit-Policy"), h.Values("RateLimit"))
				}
			}
		}
	})
}
