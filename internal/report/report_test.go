package report_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/report"
)

func TestOutcomes(t *testing.T) {
	for o, want := range map[enforce.Outcome][2]bool{ // decided, refused by failure
		enforce.Allowed:      {true, false},
		enforce.Denied:       {true, false},
		enforce.Local:        {true, false},
		enforce.FailedOpen:   {false, false},
		enforce.FailedClosed: {false, true},
		enforce.Errored:      {false, true},
		enforce.Skipped:      {false, false},
	} {
		if got := [2]bool{report.Decided(o), report.RefusedByFailure(o)}; got != want {
			t.Errorf("%s: Decided, RefusedByFailure = %v, want %v", o, got, want)
		}
	}
}

func TestFigures(t *testing.T) {
	for _, c := range []struct {
		name                    string
		d                       floodgate.Decision
		limit, remaining, reset string
		remainingN, resetN      int64
	}{
		{"fresh", floodgate.Decision{Limit: 10, Remaining: 9, ResetAfter: 6 * time.Second}, "10", "9", "6", 9, 6},
		{"fraction rounds up", floodgate.Decision{Limit: 10, Remaining: 0, ResetAfter: 1200 * time.Millisecond}, "10", "0", "2", 0, 2},
		{"debt shows nothing left", floodgate.Decision{Limit: 5, Remaining: -3, ResetAfter: time.Minute}, "5", "0", "60", 0, 60},
		{"negative reset is 0", floodgate.Decision{Limit: 1, Remaining: 1, ResetAfter: -time.Second}, "1", "1", "0", 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := report.Remaining(c.d); got != c.remainingN {
				t.Errorf("Remaining = %d, want %d", got, c.remainingN)
			}
			if got := report.Reset(c.d); got != c.resetN {
				t.Errorf("Reset = %d, want %d", got, c.resetN)
			}
			l, r, s := report.Legacy(c.d)
			if l != c.limit || r != c.remaining || s != c.reset {
				t.Errorf("Legacy = %q %q %q, want %q %q %q", l, r, s, c.limit, c.remaining, c.reset)
			}
		})
	}
	for n, want := range map[int64]uint32{-1: 0, 0: 0, 7: 7, math.MaxUint32: math.MaxUint32, math.MaxUint32 + 1: math.MaxUint32, math.MaxInt64: math.MaxUint32} {
		if got := report.Uint32(n); got != want {
			t.Errorf("Uint32(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestDraft(t *testing.T) {
	rules := []floodgate.Rule{
		{Name: "pix", Limit: 10, Window: time.Minute},
		{Name: "reports", Limit: 2, Window: time.Minute, Algorithm: floodgate.Concurrency},
	}
	ds := []floodgate.Decision{
		{Policy: "pix", Limit: 10, Window: time.Minute, Remaining: 7, ResetAfter: 41500 * time.Millisecond, Allowed: true},
		{Policy: "reports", Limit: 2, Window: time.Minute, Remaining: -1, ResetAfter: 0, Allowed: true},
	}
	policy, quota := report.NewRules(rules).Draft(ds)
	if want := `"pix";q=10;w=60, "reports";q=2;qu="concurrent-requests"`; policy != want {
		t.Errorf("policy = %s, want %s", policy, want)
	}
	if want := `"pix";r=7;t=42, "reports";r=0;t=0`; quota != want {
		t.Errorf("quota = %s, want %s", quota, want)
	}
	// The zero Rules writes the fields from the decisions: a rule it
	// does not know is a rate.
	if policy, _ := (report.Rules{}).Draft(ds); policy != `"pix";q=10;w=60, "reports";q=2;w=60` {
		t.Errorf("zero Rules: policy = %s", policy)
	}
}

func TestDeny(t *testing.T) {
	p := report.NewRules([]floodgate.Rule{
		{Name: "ip", Limit: 100, Window: time.Minute},
		{Name: "account", Limit: 5, Window: 90 * time.Second},
		{Name: "burst", Limit: 3, Window: 1500 * time.Millisecond},
	})
	d := floodgate.Decision{Policy: "account", Limit: 5, RetryAfter: 2100 * time.Millisecond, Each: []floodgate.Decision{
		{Policy: "ip", Limit: 100, Window: time.Minute, Remaining: 50, Allowed: true},
		{Policy: "account", Limit: 5, Window: 90 * time.Second, RetryAfter: 2100 * time.Millisecond},
		{Policy: "burst", Limit: 3, Window: 1500 * time.Millisecond, RetryAfter: time.Second},
	}}
	dn := p.Deny(d)
	want := []report.Violation{
		{Policy: "account", Limit: 5, Quota: "5 requests per 90 s"},
		{Policy: "burst", Limit: 3, Quota: "3 requests per 1.5s"},
	}
	if !slices.Equal(dn.Violations, want) {
		t.Errorf("Violations = %+v, want %+v", dn.Violations, want)
	}
	if w := "5 requests per 90 s (account); 3 requests per 1.5s (burst); "; dn.Detail != w {
		t.Errorf("Detail = %q, want %q", dn.Detail, w)
	}
	if dn.Retry != 2100*time.Millisecond || dn.RetryAfter() != "3" {
		t.Errorf("Retry = %v, RetryAfter = %s, want 2.1s, 3", dn.Retry, dn.RetryAfter())
	}
	if got := (report.Denial{}).RetryAfter(); got != "1" {
		t.Errorf("RetryAfter of no wait = %s, want 1 (never 0)", got)
	}
}

func TestWaits(t *testing.T) {
	d := floodgate.Decision{Each: []floodgate.Decision{
		{Window: time.Minute, Allowed: true, RetryAfter: 0},
		{Window: 2 * time.Hour, RetryAfter: 3 * time.Second},
		{Window: time.Second, RetryAfter: 4 * time.Second},
	}}
	rules := func(windows ...time.Duration) report.Rules {
		var rs []floodgate.Rule
		for i, w := range windows {
			rs = append(rs, floodgate.Rule{Name: string(rune('a' + i)), Limit: 1, Window: w})
		}
		return report.NewRules(rs)
	}
	if got := rules(time.Minute, 90*time.Second).OpaqueWait(d); got != 2*time.Hour {
		t.Errorf("OpaqueWait = %v, want the longest window in force, 2h", got)
	}
	if got := rules(3*time.Hour, time.Minute).OpaqueWait(d); got != 3*time.Hour {
		t.Errorf("OpaqueWait = %v, want the configured 3h, the longest of the rules", got)
	}
	if got := rules(time.Second, time.Minute).OpaqueWait(floodgate.Decision{}); got != time.Minute {
		t.Errorf("OpaqueWait of nothing decided = %v, want the longest rule's 1m", got)
	}
	if got := (report.Rules{}).OpaqueWait(floodgate.Decision{}); got != 0 {
		t.Errorf("zero Rules: OpaqueWait = %v, want 0", got)
	}
	if got := report.Retry(d.Each); got != 4*time.Second {
		t.Errorf("Retry = %v, want the longest of the denials, 4s", got)
	}
	allowed := []floodgate.Decision{{Allowed: true, RetryAfter: time.Hour}}
	if got := report.Retry(allowed); got != 0 {
		t.Errorf("Retry of allowed hits = %v, want 0", got)
	}
}
