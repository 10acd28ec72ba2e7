package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Rule is a limit as the fleet enforces it.
type Rule struct {
	Name   string
	Limit  int
	Window time.Duration
}

// The names of the bank's rules, as its configuration names them.
const (
	RuleGlobalIP     = "global-ip"
	RuleLoginIP      = "login-ip"
	RuleLoginAccount = "login-account"
	RulePIX          = "pix"
	RuleStatement    = "statement"
)

// Span brackets the moment of one admission: the store decided it at some
// instant between Start and End, the request's send and the answer's
// arrival.
type Span struct{ Start, End time.Time }

// Admissions returns, by rule and key, the admissions that the records
// show, in the way the bank counts them:
//
//   - global-ip, by client address: every request the store admitted, on
//     any route (a successful login is not refunded here);
//   - login-ip and login-account: failed logins (401) only, since a
//     successful one is refunded; the account limit counts a login with a
//     valid device cookie on the device's key, and the others on the
//     account's;
//   - pix and statement, by account: what the store admitted.
//
// Answers not decided by the store (failed open) are not admissions of
// any rule: the store never saw them, by design of the failure mode.
func Admissions(recs []Record) map[string]map[string][]Span {
	out := map[string]map[string][]Span{}
	add := func(rule, key string, r Record) {
		if out[rule] == nil {
			out[rule] = map[string][]Span{}
		}
		out[rule][key] = append(out[rule][key], Span{r.Start, r.End})
	}
	for _, r := range recs {
		if r.Outcome != Admitted {
			continue
		}
		add(RuleGlobalIP, r.Client, r)
		switch {
		case r.Route == Login && r.Status == 401:
			add(RuleLoginIP, r.Client, r)
			if r.Device {
				add(RuleLoginAccount, "device:"+r.Account, r)
			} else {
				add(RuleLoginAccount, "account:"+r.Account, r)
			}
		case r.Route == PIX:
			add(RulePIX, r.Account, r)
		case r.Route == Statement:
			add(RuleStatement, r.Account, r)
		}
	}
	return out
}

// Margin is how much shorter than the rule's window a stretch of time must
// be for the check to count it as one window: it covers the drift between
// the test's monotonic clock and Redis's wall clock (TIME) over a window,
// so that a window the store saw as longer is never called a violation.
func Margin(window time.Duration) time.Duration { return 10*time.Millisecond + window/1000 }

// CheckKey looks for windows of length w that admitted more than limit
// among spans, whatever order they come in. A window is counted only when
// the spans prove it: k spans whose earliest Start and latest End are less
// than w - Margin(w) apart were all decided within one window of length w,
// whatever their exact instants. It returns the most admissions proved to
// share one window, the number of windows (one per earliest span) that
// proved more than limit, and the start of the first such window.
func CheckKey(spans []Span, limit int, w time.Duration) (worst, violations int, first time.Time) {
	s := slices.Clone(spans)
	sort.Slice(s, func(i, j int) bool { return s[i].Start.Before(s[j].Start) })
	w -= Margin(w)
	for i := range s {
		end := s[i].Start.Add(w)
		n := 0
		for j := i; j < len(s) && s[j].Start.Before(end); j++ {
			if s[j].End.Before(end) {
				n++
			}
		}
		worst = max(worst, n)
		if n > limit {
			if violations == 0 {
				first = s[i].Start
			}
			violations++
		}
	}
	return worst, violations, first
}

// RuleResult is the check of one rule over a run.
type RuleResult struct {
	Rule Rule
	// Keys is the number of keys checked, and Admissions theirs.
	Keys, Admissions int
	// Straddling is the number of admissions left out because a Redis
	// restart (which forgets every count) fell between their Start and
	// End: they may belong to either side.
	Straddling int
	// AtLimit is the number of keys that, in some window, were proved to
	// admit their full limit: the load pressed the rule.
	AtLimit int
	// Worst is the most admissions proved to share one window, on any
	// key.
	Worst int
	// Violations counts windows proved to admit more than the limit; it
	// must be 0. Example describes the first.
	Violations int
	Example    string
}

// Check checks every rule against the admissions in recs. losses are the
// instants at which Redis lost its state (killed; it came back empty):
// counts start again from zero there, so no window is checked across one,
// and an admission that straddles one is left out. Every other fault
// (a frozen Redis, a full one, a flushed script cache, a restarted
// replica) keeps the counts, so windows across them are checked too: they
// hold only the store's own admissions, since a failed-open answer is not
// one.
func Check(rules []Rule, recs []Record, losses []time.Time) []RuleResult {
	adm := Admissions(recs)
	var out []RuleResult
	for _, rule := range rules {
		res := RuleResult{Rule: rule}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range adm[rule.Name] {
				if !yield(k) {
					return
				}
			}
		})
		for _, key := range keys {
			epochs := map[int][]Span{}
			for _, sp := range adm[rule.Name][key] {
				e, ok := epoch(sp, losses)
				if !ok {
					res.Straddling++
					continue
				}
				epochs[e] = append(epochs[e], sp)
			}
			res.Keys++
			keyAtLimit := false
			for _, spans := range epochs {
				res.Admissions += len(spans)
				worst, v, first := CheckKey(spans, rule.Limit, rule.Window)
				res.Worst = max(res.Worst, worst)
				keyAtLimit = keyAtLimit || worst >= rule.Limit
				if v > 0 && res.Violations == 0 {
					res.Example = fmt.Sprintf("key %s: %d admissions within %v from %s", key, worst, rule.Window, first.Format("15:04:05.000"))
				}
				res.Violations += v
			}
			if keyAtLimit {
				res.AtLimit++
			}
		}
		out = append(out, res)
	}
	return out
}

// epoch returns how many losses came before sp, and false if one falls
// within it.
func epoch(sp Span, losses []time.Time) (int, bool) {
	n := 0
	for _, l := range losses {
		switch {
		case !l.After(sp.Start):
			n++
		case !l.After(sp.End):
			return 0, false
		}
	}
	return n, true
}

// Percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, and 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
