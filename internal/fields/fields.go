// Package fields writes the answer's rate-limit fields, as
// draft-ietf-httpapi-ratelimit-headers-11 defines them (Structured Field
// Lists, RFC 9651): HTTP headers, gRPC metadata and Envoy's
// response_headers_to_add all carry the same values. The transports
// (httplimit, grpclimit, rls) share it.
package fields

import (
	"slices"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Seconds rounds d up to whole seconds; a negative d is 0.
func Seconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// RetrySeconds is a wait of d as a client is told it: whole seconds,
// rounded up, at least 1 (RFC 9110 §10.2.3 has no fractions, and 0 would
// invite an immediate retry).
func RetrySeconds(d time.Duration) int64 { return max(1, Seconds(d)) }

// RetryAfter is the Retry-After value for d: RetrySeconds, in decimal.
func RetryAfter(d time.Duration) string { return strconv.FormatInt(RetrySeconds(d), 10) }

// sfMax is the largest Integer a structured field can carry (RFC 9651).
const sfMax = 999_999_999_999_999

func sfInt(n int64) int64 { return min(max(n, 0), sfMax) }

// PolicyMember serializes the RateLimit-Policy list member of rule r:
// "pix";q=10;w=60. The window is in whole seconds, rounded up, at least 1.
// A Concurrency rule's quota is of concurrent requests, and it has no
// window (its Window is a lease's time to live):
// "reports";q=2;qu="concurrent-requests".
// Members of several rules are joined by ", " (RFC 9651 §4.1.1). A valid
// rule's name (1-64 bytes of [A-Za-z0-9_.-]) is an sf-string as it is, so
// the member is written by hand, as it is on every request of a live or
// overridden rule; any other name goes through httpsfv, which escapes it
// or refuses it.
func PolicyMember(r floodgate.Rule) (string, error) {
	if !plainName(r.Name) {
		it := httpsfv.NewItem(r.Name)
		it.Params.Add("q", sfInt(r.Limit))
		if r.Algorithm == floodgate.Concurrency {
			it.Params.Add("qu", concurrentRequests)
		} else {
			it.Params.Add("w", max(1, Seconds(r.Window)))
		}
		return httpsfv.Marshal(httpsfv.List{it})
	}
	return string(appendPlainMember(make([]byte, 0, len(r.Name)+48), r)), nil
}

// concurrentRequests is the quota unit of a Concurrency rule's policy
// (draft-ietf-httpapi-ratelimit-headers, "Quota Unit Parameter"); other
// rules count requests, the default unit, which is left unsaid.
const concurrentRequests = "concurrent-requests"

// PolicyField serializes the RateLimit-Policy field of ds, one list
// member per decision, each describing the rule that decided it (the
// rule in force: an override's limit and window, under the decision's
// Policy): "pix";q=10;w=60, joined by ", ". A member whose name
// PolicyMember refuses is left out. concurrent, if not nil, reports the
// policies of Concurrency rules (a Decision does not carry its
// algorithm).
func PolicyField(ds []floodgate.Decision, concurrent func(policy string) bool) string {
	b := make([]byte, 0, 32*len(ds))
	for _, d := range ds {
		sep := len(b) > 0
		r := floodgate.Rule{Name: d.Policy, Limit: d.Limit, Window: d.Window}
		if concurrent != nil && concurrent(d.Policy) {
			r.Algorithm = floodgate.Concurrency
		}
		if !plainName(d.Policy) {
			m, err := PolicyMember(r)
			if err != nil {
				continue
			}
			if sep {
				b = append(b, ", "...) // RFC 9651 §4.1.1
			}
			b = append(b, m...)
			continue
		}
		if sep {
			b = append(b, ", "...)
		}
		b = appendPlainMember(b, r)
	}
	return string(b)
}

// Policies is the RateLimit-Policy field of a route's (or a method's)
// limits, written once: Field answers with it when the decisions are of
// those rules exactly, the usual case, and writes the field from the
// decisions otherwise (an override, a limit skipped). The zero value
// always writes. It is safe for concurrent use once built.
type Policies struct {
	rules      []floodgate.Decision // Policy, Limit and Window of each rule, in order
	concurrent []string             // the policies of the Concurrency rules
	field      string
}

// NewPolicies returns the Policies of rules, in order.
func NewPolicies(rules []floodgate.Rule) Policies {
	p := Policies{rules: make([]floodgate.Decision, len(rules))}
	for i, r := range rules {
		p.rules[i] = floodgate.Decision{Policy: r.Name, Limit: r.Limit, Window: r.Window}
		if r.Algorithm == floodgate.Concurrency {
			p.concurrent = append(p.concurrent, r.Name)
		}
	}
	p.field = PolicyField(p.rules, p.isConcurrent)
	return p
}

// isConcurrent reports whether policy is one of a Concurrency rule. An
// override keeps a rule's name and never turns a rate into a concurrency
// limit or back, so the policy tells it.
func (p Policies) isConcurrent(policy string) bool {
	return slices.Contains(p.concurrent, policy)
}

// Quota describes the limit that decided d, for people (a 429's detail, a
// gRPC QuotaFailure): "10 requests per 60 s" (a window that is not whole
// seconds as time.Duration writes it), or "2 requests at once" for a
// concurrency limit.
func (p Policies) Quota(d floodgate.Decision) string {
	if p.isConcurrent(d.Policy) {
		return strconv.FormatInt(d.Limit, 10) + " requests at once"
	}
	w := d.Window.String()
	if d.Window%time.Second == 0 {
		w = strconv.FormatInt(int64(d.Window/time.Second), 10) + " s"
	}
	return strconv.FormatInt(d.Limit, 10) + " requests per " + w
}

// Field returns the RateLimit-Policy field of ds.
func (p Policies) Field(ds []floodgate.Decision) string {
	if len(ds) != len(p.rules) || len(ds) == 0 {
		return PolicyField(ds, p.isConcurrent)
	}
	for i, d := range ds {
		if r := p.rules[i]; d.Policy != r.Policy || d.Limit != r.Limit || d.Window != r.Window {
			return PolicyField(ds, p.isConcurrent)
		}
	}
	return p.field
}

// appendPlainMember appends the member of r, whose name is plain (see
// plainName), by hand: it runs on every request. See PolicyMember.
func appendPlainMember(b []byte, r floodgate.Rule) []byte {
	b = append(b, '"')
	b = append(b, r.Name...)
	b = append(b, `";q=`...)
	b = strconv.AppendInt(b, sfInt(r.Limit), 10)
	if r.Algorithm == floodgate.Concurrency {
		return append(b, `;qu="`+concurrentRequests+`"`...)
	}
	b = append(b, ";w="...)
	return strconv.AppendInt(b, min(max(1, Seconds(r.Window)), sfMax), 10)
}

// plainName reports whether name is 1-64 bytes of [A-Za-z0-9_.-], as a
// valid rule's name is: an sf-string that needs no escaping.
func plainName(name string) bool {
	return name != "" && len(name) <= bounds.NameLen && bounds.BadNameByte(name) < 0
}

// QuotaField serializes the RateLimit field of ds, one list member per
// decision: "pix";r=7;t=42, joined by ", ". r is the requests left and t
// the seconds, rounded up, until the quota is whole again. A rule's name
// (1-64 bytes of [A-Za-z0-9_.-], floodgate.Rule.Validate) is an sf-string
// as it is, so its member is written by hand: it runs on every request.
// Any other name (one a configuration gave, "login#2") goes through
// httpsfv, which escapes it, or refuses it and the member is left out. r
// and t are clamped to the sf-integer range; the tests parse every field
// back with httpsfv.
func QuotaField(ds []floodgate.Decision) string {
	b := make([]byte, 0, 32*len(ds))
	for _, e := range ds {
		sep := len(b) > 0
		if !plainName(e.Policy) {
			it := httpsfv.NewItem(e.Policy)
			it.Params.Add("r", sfInt(e.Remaining))
			it.Params.Add("t", sfInt(Seconds(e.ResetAfter)))
			m, err := httpsfv.Marshal(httpsfv.List{it})
			if err != nil {
				continue
			}
			if sep {
				b = append(b, ", "...)
			}
			b = append(b, m...)
			continue
		}
		if sep {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, e.Policy...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, sfInt(e.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, sfInt(Seconds(e.ResetAfter)), 10)
	}
	return string(b)
}

// Each returns the per-hit decisions of d, in the order of its hits: d.Each,
// or d itself for a decision on one hit.
func Each(d floodgate.Decision) []floodgate.Decision {
	if d.Each != nil {
		return d.Each
	}
	return []floodgate.Decision{d}
}
