package fields

import (
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
)

// PolicyMember writes what httpsfv would, for every name: by hand for a
// rule's plain name, escaped by httpsfv for any other.
func TestPolicyMemberMatchesHTTPSFV(t *testing.T) {
	for _, r := range []floodgate.Rule{
		{Name: "pix", Limit: 10, Window: time.Minute},
		{Name: "a.b-c_D9", Limit: 1, Window: 1500 * time.Millisecond},
		{Name: "x", Limit: 1 << 62, Window: 1 << 62},
		{Name: "x", Limit: -3, Window: 0},
		{Name: strings.Repeat("n", 64), Limit: 5, Window: time.Hour},
		{Name: strings.Repeat("n", 65), Limit: 5, Window: time.Hour},
		{Name: `quo"te`, Limit: 5, Window: time.Second},
		{Name: "sp ace", Limit: 5, Window: time.Second},
		{Name: "reports", Limit: 2, Window: 30 * time.Second, Algorithm: floodgate.Concurrency},
		{Name: "sp ace", Limit: 2, Window: 30 * time.Second, Algorithm: floodgate.Concurrency},
	} {
		it := httpsfv.NewItem(r.Name)
		it.Params.Add("q", min(max(r.Limit, 0), 999_999_999_999_999))
		if r.Algorithm == floodgate.Concurrency {
			it.Params.Add("qu", "concurrent-requests") // and no window: a lease's time to live is none
		} else {
			it.Params.Add("w", min(max(1, Seconds(r.Window)), 999_999_999_999_999))
		}
		want, werr := httpsfv.Marshal(httpsfv.List{it})
		got, err := PolicyMember(r)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("PolicyMember(%q, %d, %v) = %q, %v; httpsfv says %q, %v", r.Name, r.Limit, r.Window, got, err, want, werr)
		}
	}
}

// Policies answers with the field written once when the decisions are of
// its rules exactly, and writes the rule in force otherwise: an
// override's limit, a window changed, a limit skipped, another order.
func TestPolicies(t *testing.T) {
	ip := floodgate.Rule{Name: "ip", Limit: 100, Window: time.Minute}
	acct := floodgate.Rule{Name: "acct", Limit: 10, Window: time.Hour}
	p := NewPolicies([]floodgate.Rule{ip, acct})
	d := func(r floodgate.Rule) floodgate.Decision {
		return floodgate.Decision{Policy: r.Name, Limit: r.Limit, Window: r.Window, Remaining: 3}
	}
	over := acct
	over.Limit = 7
	for _, c := range []struct {
		ds   []floodgate.Decision
		want string
	}{
		{[]floodgate.Decision{d(ip), d(acct)}, `"ip";q=100;w=60, "acct";q=10;w=3600`},
		{[]floodgate.Decision{d(ip), d(over)}, `"ip";q=100;w=60, "acct";q=7;w=3600`},
		{[]floodgate.Decision{d(acct)}, `"acct";q=10;w=3600`},
		{[]floodgate.Decision{d(acct), d(ip)}, `"acct";q=10;w=3600, "ip";q=100;w=60`},
		{nil, ``},
	} {
		if got := p.Field(c.ds); got != c.want {
			t.Errorf("Field(%v) = %q, want %q", c.ds, got, c.want)
		}
	}
	if got := (Policies{}).Field([]floodgate.Decision{d(ip)}); got != `"ip";q=100;w=60` {
		t.Errorf("the zero Policies: %q", got)
	}
	own := []floodgate.Decision{d(ip), d(acct)}
	if n := testing.AllocsPerRun(100, func() { p.Field(own) }); n != 0 {
		t.Errorf("Field of the route's own rules allocates %v times, want 0", n)
	}
}

// A concurrency limit's member says its quota is of concurrent requests,
// with no window, whether Policies answers with its field written once or
// writes the decisions' (an override's limit, a limit skipped).
func TestPoliciesOfConcurrencyLimits(t *testing.T) {
	rate := floodgate.Rule{Name: "rate", Limit: 100, Window: time.Minute}
	held := floodgate.Rule{Name: "held", Limit: 3, Window: 30 * time.Second, Algorithm: floodgate.Concurrency}
	p := NewPolicies([]floodgate.Rule{rate, held})
	d := func(r floodgate.Rule) floodgate.Decision {
		return floodgate.Decision{Policy: r.Name, Limit: r.Limit, Window: r.Window}
	}
	over := held
	over.Limit = 5
	for _, c := range []struct {
		ds   []floodgate.Decision
		want string
	}{
		{[]floodgate.Decision{d(rate), d(held)}, `"rate";q=100;w=60, "held";q=3;qu="concurrent-requests"`},
		{[]floodgate.Decision{d(rate), d(over)}, `"rate";q=100;w=60, "held";q=5;qu="concurrent-requests"`},
		{[]floodgate.Decision{d(held)}, `"held";q=3;qu="concurrent-requests"`},
		{[]floodgate.Decision{d(rate)}, `"rate";q=100;w=60`},
	} {
		if got := p.Field(c.ds); got != c.want {
			t.Errorf("Field(%v) = %q, want %q", c.ds, got, c.want)
		}
	}
	for _, c := range []struct {
		d    floodgate.Decision
		want string
	}{
		{d(over), "5 requests at once"},
		{d(rate), "100 requests per 60 s"},
		{floodgate.Decision{Policy: "rate", Limit: 7, Window: 1500 * time.Millisecond}, "7 requests per 1.5s"},
	} {
		if got := p.Quota(c.d); got != c.want {
			t.Errorf("Quota(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := PolicyField([]floodgate.Decision{d(held)}, nil); got != `"held";q=3;w=30` {
		t.Errorf("PolicyField without the algorithms = %q; a Decision alone reads as a rate", got)
	}
}
