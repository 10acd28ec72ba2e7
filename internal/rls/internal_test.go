package rls

import (
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

func TestToSnake(t *testing.T) {
	for in, want := range map[string]string{
		"InvalidArgument": "invalid_argument", "AlreadyExists": "already_exists",
		"Unavailable": "unavailable", "DeadlineExceeded": "deadline_exceeded", "AZaz": "a_zaz",
	} {
		if got := toSnake(in); got != want {
			t.Errorf("toSnake(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGateName(t *testing.T) {
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'a'
	}
	for in, want := range map[string]string{
		"edge": "edge", "my domain:v1": "my_domain_v1", "a.b-c_d+e/f": "a.b-c_d+e/f", "AZaz09": "AZaz09",
		"@[`{": "____", string(long): string(long[:128]),
	} {
		if got := gateName(in); got != want {
			t.Errorf("gateName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBetter: a descriptor reports its worst limit: one with figures,
// then denied, the longer wait, the fewer remaining, the longer reset.
func TestBetter(t *testing.T) {
	d := func(allowed bool, retry, remaining, reset int64) verdict {
		return verdict{have: true, dec: floodgate.Decision{Allowed: allowed, RetryAfter: time.Duration(retry), Remaining: remaining, ResetAfter: time.Duration(reset)}}
	}
	for _, c := range []struct {
		name string
		a, b verdict
		want bool
	}{
		{"figures beat none", d(true, 0, 9, 1), verdict{}, true},
		{"none loses to figures", verdict{}, d(true, 0, 9, 1), false},
		{"none and none", verdict{}, verdict{}, false},
		{"denied beats allowed", d(false, 1, 0, 1), d(true, 0, 0, 1), true},
		{"allowed loses to denied", d(true, 0, 0, 1), d(false, 1, 0, 1), false},
		{"the longer wait", d(false, 2, 0, 1), d(false, 1, 0, 1), true},
		{"the shorter wait", d(false, 1, 0, 1), d(false, 2, 0, 1), false},
		{"equal waits, fewer remaining", d(true, 0, 1, 1), d(true, 0, 2, 1), true},
		{"more remaining", d(true, 0, 2, 1), d(true, 0, 1, 1), false},
		{"the longer reset", d(true, 0, 1, 2), d(true, 0, 1, 1), true},
		{"the shorter reset", d(true, 0, 1, 1), d(true, 0, 1, 2), false},
		{"equal", d(true, 0, 1, 1), d(true, 0, 1, 1), false},
	} {
		if got := better(c.a, c.b); got != c.want {
			t.Errorf("%s: better = %v", c.name, got)
		}
	}
}

// TestSetLimit: a window is written as the longest unit that divides
// it, times unit_multiplier.
func TestSetLimit(t *testing.T) {
	for w, want := range map[time.Duration]string{
		48 * time.Hour:          "DAY x2",
		36 * time.Hour:          "HOUR x36",
		90 * time.Second:        "SECOND x90",
		2 * time.Minute:         "MINUTE x2",
		1500 * time.Millisecond: "UNKNOWN",
		500 * time.Millisecond:  "UNKNOWN",
	} {
		cl := setLimit(new(rlsv3.RateLimitResponse_RateLimit), &rlmatch.Limit{Rule: floodgate.Rule{Window: w}, RequestsPerUnit: 7}, floodgate.Rule{Window: w, Limit: 7})
		got := cl.GetUnit().String()
		if m := cl.GetUnitMultiplier(); m != nil {
			got += " x" + strconv.Itoa(int(m.GetValue()))
		}
		if got != want || cl.GetRequestsPerUnit() != 7 {
			t.Errorf("%v: %s, %d; want %s, 7", w, got, cl.GetRequestsPerUnit(), want)
		}
	}
}

// TestResetHoldsNothing: a pooled plan keeps no reference into the
// request before, even one refused half-way through its entries.
func TestResetHoldsNothing(t *testing.T) {
	entry := func(k, v string) *commonv3.RateLimitDescriptor_Entry {
		return &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	ok := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{entry("a", "1"), entry("b", "2"), entry("c", "3")}},
	}}
	refused := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{entry("secret", "value")}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{entry("", "x")}},
	}}
	p := new(plan)
	if _, _, err := p.requestEntries(ok); err != nil {
		t.Fatal(err)
	}
	p.reset()
	if _, _, err := p.requestEntries(refused); err == nil {
		t.Fatal("a descriptor with an empty key was not refused")
	}
	p.reset()
	for i, e := range p.entries[:cap(p.entries)] {
		if e != (rlmatch.Entry{}) {
			t.Errorf("entry %d of the plan's array after reset: %+v, want none", i, e)
		}
	}
	for i, es := range p.descEntries[:cap(p.descEntries)] {
		if es != nil {
			t.Errorf("descriptor %d of the plan's array after reset: %v, want none", i, es)
		}
	}
}
