package chaos

import (
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// at returns a span from ms to ms+dur milliseconds after t0.
func at(ms, dur int) Span {
	return Span{t0.Add(time.Duration(ms) * time.Millisecond), t0.Add(time.Duration(ms+dur) * time.Millisecond)}
}

func TestCheckKey(t *testing.T) {
	const limit, w = 3, time.Second // margin: 11ms
	for _, tc := range []struct {
		name              string
		spans             []Span
		worst, violations int
	}{
		{"none", nil, 0, 0},
		{"the limit in one window", []Span{at(0, 1), at(100, 1), at(200, 1)}, 3, 0},
		{"one over in one window", []Span{at(0, 1), at(100, 1), at(200, 1), at(900, 1)}, 4, 1},
		{"one over, unsorted", []Span{at(900, 1), at(200, 1), at(0, 1), at(100, 1)}, 4, 1},
		{"one over twice", []Span{at(0, 1), at(10, 1), at(20, 1), at(30, 1), at(40, 1)}, 5, 2},
		{"spread over more than a window", []Span{at(0, 1), at(400, 1), at(800, 1), at(1200, 1)}, 3, 0},
		{"the fourth answered within the clock margin of the window's end: not proved", []Span{at(0, 1), at(100, 1), at(200, 1), at(988, 1)}, 3, 0},
		{"a slow answer that may have been decided after the window", []Span{at(0, 1), at(100, 1), at(200, 1), at(500, 600)}, 3, 0},
		{"slow answers all inside the window", []Span{at(0, 300), at(100, 300), at(200, 300), at(300, 300)}, 4, 1},
		{"the same instant", []Span{at(0, 0), at(0, 0), at(0, 0), at(0, 0)}, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worst, v, _ := CheckKey(tc.spans, limit, w)
			if worst != tc.worst || v != tc.violations {
				t.Fatalf("CheckKey = worst %d, %d violations; want %d, %d", worst, v, tc.worst, tc.violations)
			}
		})
	}
}

func rec(route string, status int, ms int, mods ...func(*Record)) Record {
	r := Record{Route: route, Client: "192.0.2.1", Account: "a1", Status: status,
		Start: t0.Add(time.Duration(ms) * time.Millisecond), End: t0.Add(time.Duration(ms+1) * time.Millisecond)}
	h := http.Header{}
	if route != Login {
		h.Set("RateLimit", `"x";r=1;t=1`)
	}
	r.Outcome = Classify(route, status, h)
	for _, m := range mods {
		m(&r)
	}
	return r
}

func failedOpen(r *Record) { r.Outcome = FailedOpen }
func device(r *Record)     { r.Device = true }
func probe(n int) func(*Record) {
	return func(r *Record) { r.Probe, r.Replica = true, n }
}

func TestAdmissions(t *testing.T) {
	got := Admissions([]Record{
		rec(Login, 401, 0),
		rec(Login, 401, 1, device),
		rec(Login, 200, 2),
		rec(Login, 429, 3),
		rec(PIX, 201, 4),
		rec(PIX, 429, 5),
		rec(Statement, 200, 6),
		rec(Statement, 200, 7, failedOpen),
	})
	for _, tc := range []struct {
		rule, key string
		want      int
	}{
		{RuleGlobalIP, "192.0.2.1", 5}, // two 401s, the 200 (not refunded here), PIX, the decided statement
		{RuleLoginIP, "192.0.2.1", 2},  // failed logins only: a success is refunded
		{RuleLoginAccount, "account:a1", 1},
		{RuleLoginAccount, "device:a1", 1},
		{RulePIX, "a1", 1},
		{RuleStatement, "a1", 1}, // a failed-open answer is no admission
	} {
		if n := len(got[tc.rule][tc.key]); n != tc.want {
			t.Errorf("%s %s: %d admissions, want %d", tc.rule, tc.key, n, tc.want)
		}
	}
}

// Windows never span a Redis restart, and an admission in flight across
// one is left out.
func TestCheckAcrossLosses(t *testing.T) {
	rules := []Rule{{RulePIX, 2, time.Second}}
	var recs []Record
	for _, ms := range []int{0, 100, 300, 400, 600} {
		recs = append(recs, rec(PIX, 201, ms))
	}
	straddler := rec(PIX, 201, 250)
	straddler.End = t0.Add(350 * time.Millisecond)
	recs = append(recs, straddler)
	for _, tc := range []struct {
		name       string
		losses     []time.Time
		violations int
		straddling int
	}{
		{"no restart: 6 in one window", nil, 4, 0},
		{"restarts split them 2, 3, 1", []time.Time{t0.Add(200 * time.Millisecond), t0.Add(500 * time.Millisecond)}, 1, 0},
		{"restarts split them 2, 2, 1, one in flight across a restart", []time.Time{t0.Add(280 * time.Millisecond), t0.Add(500 * time.Millisecond)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(rules, recs, tc.losses)[0]
			if res.Violations != tc.violations || res.Straddling != tc.straddling {
				t.Fatalf("%d violations, %d straddling; want %d, %d (%+v)", res.Violations, res.Straddling, tc.violations, tc.straddling, res)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	quota := http.Header{"Ratelimit": {`"pix";r=0;t=5`}}
	for _, tc := range []struct {
		route  string
		status int
		header http.Header
		want   Outcome
	}{
		{Login, 200, nil, Admitted},
		{Login, 401, nil, Admitted},
		{Login, 429, nil, Refused},
		{Login, 500, nil, Invalid},
		{PIX, 201, quota, Admitted},
		{PIX, 429, quota, Denied},
		{PIX, 429, nil, FailedClosed},
		{PIX, 201, nil, Invalid}, // failing open on a fail-closed route
		{Statement, 200, quota, Admitted},
		{Statement, 200, nil, FailedOpen},
		{Statement, 429, quota, Denied},
		{Statement, 429, nil, Invalid}, // failing closed on a fail-open route
		{Statement, 0, nil, Unavailable},
		{PIX, 502, nil, Unavailable},
	} {
		if got := Classify(tc.route, tc.status, tc.header); got != tc.want {
			t.Errorf("Classify(%s, %d, %v) = %v, want %v", tc.route, tc.status, tc.header, got, tc.want)
		}
	}
}

func TestAnalyze(t *testing.T) {
	// Redis is killed at 1000ms and back at 2000ms; replica 1's probes
	// are decided again from 2100ms, replica 2's from 2300ms.
	f := Fault{Kind: RedisKill, Start: t0.Add(time.Second), End: t0.Add(2 * time.Second)}
	recs := []Record{
		rec(PIX, 201, 500),
		rec(PIX, 429, 995, func(r *Record) { r.Outcome, r.End = FailedClosed, t0.Add(1050*time.Millisecond) }), // in flight at the kill
		rec(Statement, 200, 1500, failedOpen),
		rec(Statement, 200, 2050, probe(1), failedOpen),
		rec(Statement, 200, 2100, probe(1)),
		rec(Statement, 429, 2300, probe(2)),
		rec(PIX, 201, 2400),
	}
	tr := Analyze(recs, []Fault{f}, []int{1, 2}, t0.Add(time.Minute))
	fr := tr.Faults[0]
	if !fr.Recovered || fr.Recovery != 301*time.Millisecond {
		t.Fatalf("recovery %v (recovered %v), want 301ms: until replica 2's first decided probe was answered", fr.Recovery, fr.Recovered)
	}
	if fr.Requests != 5 || fr.Counts.Of(PIX, FailedClosed) != 1 || fr.Counts.Of(Statement, FailedOpen) != 1 {
		t.Fatalf("during the fault: %d requests, %d PIX failed closed, %d statements failed open; want 5, 1, 1",
			fr.Requests, fr.Counts.Of(PIX, FailedClosed), fr.Counts.Of(Statement, FailedOpen))
	}
	if tr.Outside.Of(PIX, Admitted) != 2 {
		t.Fatalf("outside: %d PIX admitted, want 2", tr.Outside.Of(PIX, Admitted))
	}
	never := Analyze(recs[:3], []Fault{f}, []int{1, 2}, t0.Add(time.Minute))
	if never.Faults[0].Recovered {
		t.Fatal("a fault without a decided probe after it recovered")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("the percentile of nothing is 0")
	}
}

func TestBreakerOpenings(t *testing.T) {
	log := `time=2026-07-01T12:00:00.250Z level=WARN msg="store circuit breaker" store=redis from=closed to=open
time=2026-07-01T12:00:02.250Z level=WARN msg="store circuit breaker" store=redis from=open to=half-open
time=2026-07-01T12:00:02.300Z level=WARN msg="store circuit breaker" store=redis from=half-open to=open
time=2026-07-01T12:00:03.000Z level=INFO msg=login account=x
`
	got := BreakerOpenings(log)
	if len(got) != 2 || !got[0].Equal(t0.Add(250*time.Millisecond)) || !got[1].Equal(t0.Add(2300*time.Millisecond)) {
		t.Fatalf("BreakerOpenings = %v", got)
	}
}
