package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
	"github.com/floodgate-rl/floodgate/internal/report"
)

// QuotaExceeded is the problem type of a 429 answer, registered by
// draft-ietf-httpapi-ratelimit-headers.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problem is the RFC 9457 problem detail of a denial, described in the
// package doc.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// ServeHTTP writes p as the response: Content-Type
// application/problem+json, status p.Status and p as JSON. It is the
// answer that [Route.Deny] is given.
func (p problem) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
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

// Canonical forms of the header names, for writing to the map directly.
const (
	canonPolicy    = "Ratelimit-Policy"
	canonRateLimit = "Ratelimit"
	canonLimit     = "X-Ratelimit-Limit"
	canonRemaining = "X-Ratelimit-Remaining"
	canonReset     = "X-Ratelimit-Reset"
)

// dropQuota removes the rate-limit fields that routes wrote in h.
func dropQuota(h http.Header) {
	for _, name := range [...]string{canonPolicy, canonRateLimit, canonLimit, canonRemaining, canonReset} {
		delete(h, name)
	}
}

// writeQuota sets the RateLimit-Policy, RateLimit and legacy fields for
// decision d. The structured fields join any that an outer middleware
// wrote on one field line, one list (RFC 9651 §3.1): a client that reads
// only a field's first line (Go's Header.Get) still sees every limit.
func (rt *route) writeQuota(h http.Header, d floodgate.Decision) {
	var one [1]floodgate.Decision
	ds := d.Each
	if ds == nil {
		one[0] = d
		ds = one[:]
	}
	policy, rateLimit := rt.rules.Draft(ds)
	// One backing array for the values; each field gets a full slice of
	// it, so that a later Add to one field cannot overwrite another.
	vals := [5]string{policy, rateLimit}
	if rt.l.legacy {
		vals[2], vals[3], vals[4] = report.Legacy(d)
	}
	vs := vals[:]
	set := func(key string, i int, add bool) {
		if old := h[key]; add && len(old) > 0 {
			h[key] = []string{strings.Join(append(slices.Clip(old), vs[i]), ", ")}
			return
		}
		h[key] = vs[i : i+1 : i+1]
	}
	set(canonPolicy, 0, true)
	set(canonRateLimit, 1, true)
	if rt.l.legacy {
		set(canonLimit, 2, false)
		set(canonRemaining, 3, false)
		set(canonReset, 4, false)
	}
}

// opaqueRetryAfter is the Retry-After of an opaque denial: the longest
// window of the route's enforced rules, or of the live rules that decided
// res if one is longer. Every limit decided gives its window, the allowed ones
// too, so the answer still does not tell which one denied. A fail-closed
// denial waits at least res.FailRetryAfter, as every fail-closed one does.
func (rt *route) opaqueRetryAfter(res Result) string {
	if report.RefusedByFailure(res.Outcome) {
		return fields.RetryAfter(max(rt.rules.OpaqueWait(floodgate.Decision{}), res.FailRetryAfter()))
	}
	return fields.RetryAfter(rt.rules.OpaqueWait(res.Decision))
}

// retries reports whether an answer of status carries Retry-After: 429,
// and 503, whose Retry-After says how long the service is unavailable to
// the client (RFC 9110 §10.2.3) and keeps a fail-closed route's clients
// from retrying every second.
func retries(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// failed returns the status of a request refused because the store
// failed: the route's FailStatus, or 503 under the error failure mode.
func (rt *route) failed(res Result) int {
	if res.Outcome == enforce.Errored {
		return http.StatusServiceUnavailable
	}
	return rt.failStatus
}

// deny answers a request that res does not allow.
func (rt *route) deny(w http.ResponseWriter, r *http.Request, res Result) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	var p problem
	switch {
	case rt.Opaque:
		p = problem{Type: QuotaExceeded, Title: quotaTitle, Status: rt.status,
			Detail:           "Too many requests. Try again later.",
			ViolatedPolicies: []string{rt.Name}}
		if report.RefusedByFailure(res.Outcome) {
			p.Status = rt.failed(res)
		}
		if retries(p.Status) {
			h.Set("Retry-After", rt.opaqueRetryAfter(res))
		}
	case report.RefusedByFailure(res.Outcome):
		wait, status := res.FailRetryAfter(), rt.failed(res)
		p = problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
			Detail: "The rate limit could not be checked. Try again in " + fields.RetryAfter(wait) + " s."}
		if retries(p.Status) {
			h.Set("Retry-After", fields.RetryAfter(wait))
		}
	default:
		dn := rt.rules.Deny(res.Decision)
		var violated []string
		for _, v := range dn.Violations {
			violated = append(violated, v.Policy)
		}
		p = problem{Type: QuotaExceeded, Title: quotaTitle, Status: rt.status, ViolatedPolicies: violated,
			Detail: "Quota exceeded: " + dn.Detail + "retry after " + dn.RetryAfter() + " s."}
		if retries(p.Status) {
			h.Set("Retry-After", dn.RetryAfter())
		}
	}
	if rt.Deny == nil {
		p.ServeHTTP(w, r)
		return
	}
	// Deny finds the verdict where a handler would (FromContext).
	rt.Deny(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, res)), p)
}
