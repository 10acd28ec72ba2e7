package chaos

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

var breakerRE = regexp.MustCompile(`(?m)^time=(\S+) level=WARN msg="store circuit breaker" .*\bto=open\b`)

// BreakerOpenings returns the instants at which the replicas' logs (text
// format) say their store circuit breaker opened.
func BreakerOpenings(log string) []time.Time {
	var out []time.Time
	for _, m := range breakerRE.FindAllStringSubmatch(log, -1) {
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// Group names the records' route groups in the results: the route, or
// "statement probe" for the probes sent straight to a replica.
func Group(r Record) string {
	if r.Probe {
		return "statement probe"
	}
	return r.Route
}

// groups orders the route groups in the results.
var groups = []string{Login, PIX, Statement, "statement probe"}

// Counts counts outcomes by route group.
type Counts map[string]*[numOutcomes]int

func (c Counts) add(r Record) {
	g := Group(r)
	if c[g] == nil {
		c[g] = new([numOutcomes]int)
	}
	c[g][r.Outcome]++
}

// Of returns the count of outcome o in group g.
func (c Counts) Of(g string, o Outcome) int {
	if c[g] == nil {
		return 0
	}
	return c[g][o]
}

// FaultResult is a fault with what the load saw during its effect: the
// requests in flight at some instant from its Start to its recovery.
type FaultResult struct {
	Fault
	Recovery  time.Duration
	Recovered bool
	Requests  int
	Counts    Counts
}

// LatencyRow gives the latency figures of one route group, during faults
// or outside them.
type LatencyRow struct {
	Group         string
	DuringFault   bool
	N             int
	P50, P99, Max time.Duration
}

// Traffic is the analysis of the records against the faults.
type Traffic struct {
	Requests int
	Faults   []FaultResult
	// Outside counts the outcomes of requests that started outside every
	// fault's effect.
	Outside   Counts
	Latencies []LatencyRow
	// OwnerLogins and OwnerOK count the owner's logins with a known device
	// outside faults, while the botnet hammered the account, and those
	// that succeeded.
	OwnerLogins, OwnerOK int

	spans []interval // the faults' effects
}

type interval struct{ from, to time.Time }

// DuringFault reports whether instant t lies within a fault's effect.
func (t Traffic) DuringFault(at time.Time) bool {
	for _, s := range t.spans {
		if !at.Before(s.from) && !at.After(s.to) {
			return true
		}
	}
	return false
}

// Analyze sorts recs (ordered by start) into the faults' effects and
// outside them. replicas numbers the replicas; runEnd ends the effect of a
// fault that never recovered.
func Analyze(recs []Record, faults []Fault, replicas []int, runEnd time.Time) Traffic {
	t := Traffic{Requests: len(recs), Outside: Counts{}}
	var spans []interval
	for _, f := range faults {
		f.SetRecovery(recs, replicas)
		fr := FaultResult{Fault: f, Counts: Counts{}}
		fr.Recovery, fr.Recovered = f.Recovery(replicas)
		until := f.Until(replicas, runEnd)
		spans = append(spans, interval{f.Start, until})
		for _, r := range recs {
			if overlaps(r, f.Start, until) {
				fr.Requests++
				fr.Counts.add(r)
			}
		}
		t.Faults = append(t.Faults, fr)
	}
	during := func(r Record) bool {
		for _, s := range spans {
			if overlaps(r, s.from, s.to) {
				return true
			}
		}
		return false
	}
	t.spans = spans
	lat := map[string]map[bool][]time.Duration{}
	for _, r := range recs {
		d := during(r)
		if !d {
			t.Outside.add(r)
			if r.Route == Login && r.Account == accountName(ownerAccount) && r.Device {
				t.OwnerLogins++
				if r.Status == 200 {
					t.OwnerOK++
				}
			}
		}
		g := Group(r)
		if lat[g] == nil {
			lat[g] = map[bool][]time.Duration{}
		}
		lat[g][d] = append(lat[g][d], r.End.Sub(r.Start))
	}
	for _, g := range groups {
		for _, d := range []bool{false, true} {
			ds := lat[g][d]
			t.Latencies = append(t.Latencies, LatencyRow{Group: g, DuringFault: d, N: len(ds),
				P50: Percentile(ds, 50), P99: Percentile(ds, 99), Max: Percentile(ds, 100)})
		}
	}
	return t
}

// overlaps reports whether r was in flight at some instant from from to
// to: a request sent just before a fault is answered during it.
func overlaps(r Record, from, to time.Time) bool {
	return !r.End.Before(from) && !r.Start.After(to)
}

// ReplicaFigures are one replica slot's resource figures.
type ReplicaFigures struct {
	N        int
	Restarts int
	// RSS: after start-up (idle), after the warm-up (under load), the most
	// seen during the run, and at the end (idle again, after the load).
	RSSStart, RSSWarm, RSSPeak, RSSEnd int64
	// Goroutines after start-up and at the end, both idle.
	GoroutinesStart, GoroutinesEnd int
	// Panics counts panic, fatal error and data race reports in its
	// output.
	Panics int
	// CleanExit reports whether the last process exited with status 0 on
	// SIGTERM.
	CleanExit bool
}

// Results are the figures of a chaos run.
type Results struct {
	Seed         uint64
	Date         time.Time
	GoVersion    string
	RedisVersion string
	// Wall is the whole test's duration; LoadFor the load's.
	Wall, LoadFor time.Duration
	Config        []string
	Rules         []RuleResult
	Traffic       Traffic
	// ServerOutcomes are the replicas' own counts of decisions, by route
	// and outcome (floodgate_decisions_total), summed over replicas
	// and restarts.
	ServerOutcomes map[string]float64
	Replicas       []ReplicaFigures
	// BreakerOpenings counts the times a replica's circuit breaker opened
	// (from their logs), and BreakerOpeningsOutside those outside every
	// fault's effect: the store missed its budget on a busy machine.
	BreakerOpenings, BreakerOpeningsOutside int
	// ProxyErrors are the errors behind the proxy's 502s.
	ProxyErrors map[string]int
	Hostile     Hostile
	// LogBytes is the size of the replicas' logs; Leaks lists the secrets
	// found in them (must be empty), out of SecretsChecked.
	LogBytes       int
	SecretsChecked int
	Leaks          []string
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// WriteMarkdown writes the results as the Markdown of
// docs/reliability-results.md.
func (r *Results) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Reliability results\n\n")
	p("Generated by `TestChaos` (`internal/chaos`) with `CHAOS_RESULTS` naming this file; `scripts/test.sh` prints the same figures on every run.\n")
	p("Do not edit it by hand. [RELIABILITY.md](RELIABILITY.md) explains what each figure means.\n\n")
	p("- run: %s, seed %d (replay with `CHAOS_SEED=%d go test -run TestChaos ./internal/chaos`)\n", r.Date.UTC().Format("2006-01-02 15:04:05 MST"), r.Seed, r.Seed)
	p("- %s, %s, 3 bankapi processes + 1 redis-server on loopback, on a shared machine\n", r.GoVersion, r.RedisVersion)
	p("- test duration %s, of which %s under load; %d requests recorded\n", ms(r.Wall), ms(r.LoadFor), r.Traffic.Requests)
	p("- replica configuration: `%s`\n\n", strings.Join(r.Config, "` `"))

	p("## Limits held: over-admissions\n\n")
	p("Every admission (2xx, and 401 on login) is logged with the time its request was sent and its answer arrived. A window counts only when the log proves it: `limit+1` admissions whose first send and last answer lie less than the rule's window (minus a clock margin) apart. Windows never span a Redis restart (its counts are gone); they do span every other fault, whose counts survive.\n\n")
	p("| rule | limit | keys | admissions checked | keys that reached the limit | most in one window | over-admissions |\n|---|---|---|---|---|---|---|\n")
	for _, rr := range r.Rules {
		p("| %s | %d / %v | %d | %d | %d | %d | **%d** |\n", rr.Rule.Name, rr.Rule.Limit, rr.Rule.Window, rr.Keys, rr.Admissions, rr.AtLimit, rr.Worst, rr.Violations)
	}
	straddling := 0
	for _, rr := range r.Rules {
		straddling += rr.Straddling
	}
	p("\nAdmissions left out because a Redis restart fell between their send and their answer: %d.\n\n", straddling)

	p("## Faults\n\n")
	p("Recovery is the time from the fault's end (Redis answers again, or the restarted replica is healthy) until every replica it touched decided a probe through Redis again; probes go straight to each replica every 50 ms. \"During\" runs from the fault's start to that recovery.\n\n")
	p("| # | fault | at | held | recovery | requests during | PIX: failed closed / by Redis | statement: failed open / by Redis | login: refused / admitted | unavailable: through the proxy / probes |\n|---|---|---|---|---|---|---|---|---|---|\n")
	var t0 time.Time
	if len(r.Traffic.Faults) > 0 {
		t0 = r.Traffic.Faults[0].Start
	}
	for i, f := range r.Traffic.Faults {
		rec := "never"
		if f.Recovered {
			rec = ms(f.Recovery)
		}
		name := string(f.Kind)
		if f.Kind == ReplicaRestart {
			name += fmt.Sprintf(" (replica %d)", f.Replica)
		}
		c := f.Counts
		all := func(g string, os ...Outcome) int {
			n := 0
			for _, o := range os {
				n += c.Of(g, o)
			}
			return n
		}
		p("| %d | %s | +%s | %s | %s | %d | %d / %d | %d / %d | %d / %d | %d / %d |\n", i+1, name, ms(f.Start.Sub(t0)), ms(f.End.Sub(f.Start)), rec, f.Requests,
			c.Of(PIX, FailedClosed), all(PIX, Admitted, Denied),
			c.Of(Statement, FailedOpen)+c.Of("statement probe", FailedOpen), all(Statement, Admitted, Denied)+all("statement probe", Admitted, Denied),
			c.Of(Login, Refused), c.Of(Login, Admitted),
			all(Login, Unavailable)+all(PIX, Unavailable)+all(Statement, Unavailable), c.Of("statement probe", Unavailable))
	}
	for i, f := range r.Traffic.Faults {
		if f.Note != "" {
			p("\nFault %d (%s): %s\n", i+1, f.Kind, f.Note)
		}
	}
	during := 0
	for _, f := range r.Traffic.Faults {
		during += f.Requests
	}
	p("\n%d faults; %d of the %d requests were in flight during one.\n", len(r.Traffic.Faults), during, r.Traffic.Requests)
	p("\nFault kinds:\n\n")
	for _, k := range Kinds {
		p("- `%s`: %s\n", k, k.Describe())
	}

	p("\n## Failure modes: outcomes by route\n\n")
	p("As the client saw them, outside every fault's effect. \"invalid\" would be an answer the route's failure mode forbids (a PIX admitted without a decision, a statement refused without one, any other status); it must be 0 everywhere, during faults too.\n\n")
	p("| route | %s |\n|---%s|\n", strings.Join(outcomeNames[:], " | "), strings.Repeat("|---", numOutcomes))
	for _, g := range groups {
		p("| %s |", g)
		for o := range Outcome(numOutcomes) {
			p(" %d |", r.Traffic.Outside.Of(g, o))
		}
		p("\n")
	}
	p("\nAnswers decided by a failure mode outside the injected faults come from the store missing its 50 ms budget on the busy machine: one decision at a time, or, after 5 in a row, a replica's breaker open for 2 s. Breaker openings in the replicas' logs: %d, of which %d outside every fault's effect.\n", r.BreakerOpenings, r.BreakerOpeningsOutside)
	if len(r.ProxyErrors) > 0 {
		p("\nErrors behind the proxy's 502s: %v.\n", r.ProxyErrors)
	}
	p("\nThe replicas' own count of decisions (`floodgate_decisions_total`, all replicas and restarts, whole run):\n\n")
	p("| route | outcome | decisions |\n|---|---|---|\n")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.ServerOutcomes {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		route, outcome, _ := strings.Cut(k, " ")
		p("| %s | %s | %.0f |\n", route, outcome, r.ServerOutcomes[k])
	}
	p("\nThe account owner logging in with a known device while a botnet of 40 addresses hammered the account, outside faults: %d of %d logins succeeded.\n\n", r.Traffic.OwnerOK, r.Traffic.OwnerLogins)

	p("## Latency\n\n")
	p("From the client, through the proxy (probes: straight to a replica). The decision budget is the default `DECISION_TIMEOUT` of 50 ms; login includes a bcrypt comparison.\n\n")
	p("| route | when | requests | p50 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, l := range r.Traffic.Latencies {
		when := "outside faults"
		if l.DuringFault {
			when = "during faults"
		}
		p("| %s | %s | %d | %s | %s | %s |\n", l.Group, when, l.N, ms(l.P50), ms(l.P99), ms(l.Max))
	}

	p("\n## Replicas\n\n")
	p("RSS from `/proc/<pid>/status`; goroutines from each replica's `go_goroutines`. Start and end are idle (no load, idle connections closed); a restarted replica's end figures are its new process's.\n\n")
	p("| replica | restarts | RSS start | RSS after warm-up | RSS peak | RSS end | goroutines start | goroutines end | panics | clean exit |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rf := range r.Replicas {
		p("| %d | %d | %s | %s | %s | %s | %d | %d | %d | %v |\n", rf.N, rf.Restarts, mib(rf.RSSStart), mib(rf.RSSWarm), mib(rf.RSSPeak), mib(rf.RSSEnd), rf.GoroutinesStart, rf.GoroutinesEnd, rf.Panics, rf.CleanExit)
	}

	h := r.Hostile
	p("\n## Hostile input on the processes\n\n")
	p("| check | figure |\n|---|---|\n")
	p("| login, wrong password: known account vs unknown document (a fourth process with the built-in directory, bcrypt cost 10; median of %d each) | %s vs %s; every 401 the same body: %v; answers other than 401: %d |\n", h.TimingN, ms(h.TimingKnown), ms(h.TimingUnknown), h.TimingSameAnswer, h.TimingOther)
	p("| %d logins from an untrusted peer, each spoofing another address in X-Forwarded-For, Forwarded, X-Real-IP, True-Client-IP | %d admitted (per-IP limit %d): keyed on the peer |\n", h.SpoofAttempts, h.SpoofAdmitted, h.SpoofLimit)
	p("| %s login body | %d after the client sent %d KiB |\n", mib(h.BodySize), h.BodyStatus, h.BodySent>>10)
	cut := "never (within a minute)"
	if h.SlowlorisCutOff {
		cut = ms(h.SlowlorisCut) + " (ReadHeaderTimeout 5 s)"
	}
	p("| headers sent one byte every 100 ms (slowloris) | cut off after %s |\n", cut)
	p("| secrets in the four processes' logs (%d KiB: documents, TOKEN_SECRET, passwords, every token and device cookie issued: %d values) | %d found |\n", r.LogBytes>>10, r.SecretsChecked, len(r.Leaks))
	_, err := io.WriteString(w, b.String())
	return err
}
