// Package report renders what the enforcement layer decided, for every
// transport: the figures that httplimit's headers and problem details,
// grpclimit's metadata and status details, and the RLS service's
// statuses, response_headers_to_add and /json answer show. Each figure is
// computed here once, from enforce's per-hit decisions (the rule in
// force, under the name it is reported by); internal/fields serializes
// the structured fields. A transport only picks what it shows and writes
// it in its own syntax: nothing here decides, re-resolves a rule or
// amends a decision.
package report

import (
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
)

// Decided reports whether a limiter decided o, so that the answer has
// figures to show: Allowed, Denied or Local. A request that failed open or
// closed, errored or was skipped has none.
func Decided(o enforce.Outcome) bool {
	return o == enforce.Allowed || o == enforce.Denied || o == enforce.Local
}

// RefusedByFailure reports whether o refused a request because the store
// failed: fail-closed, or the error failure mode.
func RefusedByFailure(o enforce.Outcome) bool {
	return o == enforce.FailedClosed || o == enforce.Errored
}

// Remaining is what d has left as every transport shows it: never below
// 0 (a key in debt has nothing left).
func Remaining(d floodgate.Decision) int64 { return max(d.Remaining, 0) }

// Reset is d's time until the quota is whole again, in whole seconds,
// rounded up: X-RateLimit-Reset, the RateLimit field's t and RLS's
// duration_until_reset.
func Reset(d floodgate.Decision) int64 { return fields.Seconds(d.ResetAfter) }

// Uint32 clamps n to the range of a uint32, as RLS's requests_per_unit
// and limit_remaining carry it.
func Uint32(n int64) uint32 { return uint32(min(max(n, 0), int64(^uint32(0)))) }

// Rules is what the answers of a route (or a gRPC method) say of its
// enforced rules, worked out once when it is built. The zero Rules
// describes none: it writes every field from the decisions (the RLS
// service, whose rules come with each request). It is safe for concurrent
// use.
type Rules struct {
	policies fields.Policies
	longest  time.Duration
}

// NewRules returns the Rules of enforced, a route's enforced rules (its
// shadow ones left out), in order.
func NewRules(enforced []floodgate.Rule) Rules {
	r := Rules{policies: fields.NewPolicies(enforced)}
	for _, rule := range enforced {
		r.longest = max(r.longest, rule.Window)
	}
	return r
}

// Draft returns the draft-11 RateLimit-Policy and RateLimit fields of ds,
// the per-hit decisions, one list member each, in order.
func (r Rules) Draft(ds []floodgate.Decision) (policy, quota string) {
	return r.policies.Field(ds), fields.QuotaField(ds)
}

// Legacy returns the X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset values of d.
func Legacy(d floodgate.Decision) (limit, remaining, reset string) {
	return strconv.FormatInt(d.Limit, 10), strconv.FormatInt(Remaining(d), 10), strconv.FormatInt(Reset(d), 10)
}

// Violation is one limit that denied a request.
type Violation struct {
	Policy string // the name the limit is reported under
	Limit  int64  // the limit in force
	Quota  string // the limit for people: "10 requests per 60 s" (fields.Policies.Quota)
}

// Denial is what a denied request's answer says of it: the limits that
// denied, in the order of the hits, and how long to wait.
type Denial struct {
	Violations []Violation
	// Detail lists the violations for people, each "quota (policy); ":
	// "10 requests per 60 s (pix); ".
	Detail string
	// Retry is the time until one more request would be allowed: the
	// decision's RetryAfter.
	Retry time.Duration
}

// Deny returns the Denial of d, a denied decision.
func (r Rules) Deny(d floodgate.Decision) Denial {
	var (
		vs     []Violation
		detail strings.Builder
	)
	for _, e := range fields.Each(d) {
		if e.Allowed {
			continue
		}
		q := r.policies.Quota(e)
		vs = append(vs, Violation{Policy: e.Policy, Limit: e.Limit, Quota: q})
		detail.WriteString(q)
		detail.WriteString(" (")
		detail.WriteString(e.Policy)
		detail.WriteString("); ")
	}
	return Denial{Violations: vs, Detail: detail.String(), Retry: d.RetryAfter}
}

// RetryAfter is the Retry-After value of the Denial's wait (see
// fields.RetryAfter).
func (d Denial) RetryAfter() string { return fields.RetryAfter(d.Retry) }

// OpaqueWait is how long an opaque denial tells its client to wait, so
// that the answer does not tell which limit denied: the longest window of
// the enforced rules as configured, or of a rule in force that decided d
// (a live rule's, an override's; the allowed ones too) if one is longer.
// A denial because the store failed passes the zero d.
func (r Rules) OpaqueWait(d floodgate.Decision) time.Duration {
	longest := r.longest
	for _, e := range fields.Each(d) {
		longest = max(longest, e.Window)
	}
	return longest
}

// Retry is the Retry-After of a denial that showed ds: the longest
// RetryAfter of those that denied; 0 if none did.
func Retry(ds []floodgate.Decision) time.Duration {
	var retry time.Duration
	for _, d := range ds {
		if !d.Allowed {
			retry = max(retry, d.RetryAfter)
		}
	}
	return retry
}
