package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-rl/floodgate"
)

// Header names the middleware writes.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderLegacyLimit     = "X-RateLimit-Limit"
	HeaderLegacyRemaining = "X-RateLimit-Remaining"
	HeaderLegacyReset     = "X-RateLimit-Reset"
)

// QuotaExceeded is the problem type of a 429 answer, registered by
// draft-ietf-httpapi-ratelimit-headers.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the RFC 9457 problem detail that a denied request gets as an
// application/problem+json body.
type Problem struct {
	// Type is QuotaExceeded for a denial, "about:blank" when a fail-closed
	// route could not check its limits.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code of the answer.
	Status int `json:"status"`
	// Detail explains this occurrence, for a human.
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the policies whose quota is exhausted: those
	// in the RateLimit-Policy field, or the route's name on an opaque
	// route.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// ServeHTTP writes p as the response: Content-Type
// application/problem+json, status p.Status and p as JSON. It is the
// default [Route.Deny].
func (p Problem) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: every field marshals
		http.Error(w, http.StatusText(p.Status), p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

const quotaTitle = "Request cannot be satisfied as assigned quota has been exceeded"

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// retryAfter is the Retry-After value for d: whole seconds, rounded up, at
// least 1.
func retryAfter(d time.Duration) string { return strconv.FormatInt(max(1, seconds(d)), 10) }

// window formats d for a human: "60 s", or "1.5s" if not whole seconds.
func window(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	}
	return d.String()
}

// sfMax is the largest Integer a structured field can carry (RFC 9651).
const sfMax = 999_999_999_999_999

func sfInt(n int64) int64 { return min(max(n, 0), sfMax) }

// policyMember serializes the RateLimit-Policy list member of rule r:
// "pix";q=10;w=60. The window is in whole seconds, rounded up.
func policyMember(r floodgate.Rule) (string, error) {
	it := httpsfv.NewItem(r.Name)
	it.Params.Add("q", sfInt(r.Limit))
	it.Params.Add("w", max(1, seconds(r.Window)))
	return httpsfv.Marshal(httpsfv.List{it})
}

// rateLimitField serializes the RateLimit field of ds, one list member per
// decision: "pix";r=7;t=42, joined by ", " (RFC 9651 §4.1.1). It is
// written by hand because it runs on every request: a policy name is
// 1-64 bytes of [A-Za-z0-9_.-] (floodgate.Rule.Validate), which an sf-string
// carries as it is, and r and t are clamped to the sf-integer range; the
// tests parse every field back with httpsfv.
func rateLimitField(ds []floodgate.Decision) string {
	b := make([]byte, 0, 32*len(ds))
	for i, e := range ds {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, e.Policy...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, sfInt(e.Remaining), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, sfInt(seconds(e.ResetAfter)), 10)
	}
	return string(b)
}

// each returns the per-policy decisions of d, in the order of its hits.
func each(d floodgate.Decision) []floodgate.Decision {
	if d.Each != nil {
		return d.Each
	}
	return []floodgate.Decision{d}
}

// Canonical forms of the header names, for writing to the map directly.
const (
	canonPolicy    = "Ratelimit-Policy"
	canonRateLimit = "Ratelimit"
	canonLimit     = "X-Ratelimit-Limit"
	canonRemaining = "X-Ratelimit-Remaining"
	canonReset     = "X-Ratelimit-Reset"
)

// writeQuota sets the RateLimit-Policy, RateLimit and legacy fields for
// decision d. The structured fields are added to any that an outer
// middleware wrote, which keeps them one list (RFC 9651 §3.1).
func (rt *route) writeQuota(h http.Header, d floodgate.Decision) {
	var one [1]floodgate.Decision
	ds := d.Each
	if ds == nil {
		one[0] = d
		ds = one[:]
	}
	policy := rt.allPolicies
	if len(ds) != len(rt.Limits) {
		var b strings.Builder
		for i, e := range ds {
			if i > 0 {
				b.WriteString(", ") // RFC 9651 §4.1.1: members are joined by ", "
			}
			b.WriteString(rt.policies[e.Policy])
		}
		policy = b.String()
	}
	rateLimit := rateLimitField(ds)
	// One backing array for the values; each field gets a full slice of
	// it, so that a later Add to one field cannot overwrite another.
	vals := [5]string{policy, rateLimit}
	if rt.legacy {
		vals[2] = strconv.FormatInt(d.Limit, 10)
		vals[3] = strconv.FormatInt(max(d.Remaining, 0), 10)
		vals[4] = strconv.FormatInt(seconds(d.ResetAfter), 10)
	}
	vs := vals[:]
	set := func(key string, i int, add bool) {
		if old := h[key]; add && len(old) > 0 {
			h[key] = append(old, vs[i])
			return
		}
		h[key] = vs[i : i+1 : i+1]
	}
	set(canonPolicy, 0, true)
	set(canonRateLimit, 1, true)
	if rt.legacy {
		set(canonLimit, 2, false)
		set(canonRemaining, 3, false)
		set(canonReset, 4, false)
	}
}

// deny answers a request that res does not allow.
func (rt *route) deny(w http.ResponseWriter, r *http.Request, res Result) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	var p Problem
	switch {
	case rt.Opaque:
		p = Problem{Type: QuotaExceeded, Title: quotaTitle, Status: rt.status,
			Detail:           "Too many requests. Try again later.",
			ViolatedPolicies: []string{rt.Name}}
		if res.Outcome == FailedClosed {
			p.Status = rt.failStatus
		}
		if p.Status == http.StatusTooManyRequests {
			h.Set("Retry-After", rt.opaqueRetry)
		}
	case res.Outcome == FailedClosed:
		wait := max(MinFailRetryAfter, res.storeRetry)
		p = Problem{Type: "about:blank", Title: http.StatusText(rt.failStatus), Status: rt.failStatus,
			Detail: fmt.Sprintf("The rate limit could not be checked. Try again in %d s.", seconds(wait))}
		if p.Status == http.StatusTooManyRequests {
			h.Set("Retry-After", retryAfter(wait))
		}
	default:
		d := res.Decision
		var violated []string
		var detail strings.Builder
		for _, e := range each(d) {
			if !e.Allowed {
				violated = append(violated, e.Policy)
				fmt.Fprintf(&detail, "%d requests per %s (%s); ", e.Limit, window(e.Window), e.Policy)
			}
		}
		p = Problem{Type: QuotaExceeded, Title: quotaTitle, Status: rt.status, ViolatedPolicies: violated,
			Detail: fmt.Sprintf("Quota exceeded: %sretry after %d s.", detail.String(), max(1, seconds(d.RetryAfter)))}
		if p.Status == http.StatusTooManyRequests {
			h.Set("Retry-After", retryAfter(d.RetryAfter))
		}
	}
	rt.denyFunc(w, r, p)
}
