package grpclimit

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
)

// The response metadata keys, after draft-ietf-httpapi-ratelimit-headers-11's
// RateLimit-Policy and RateLimit fields (gRPC metadata keys are lower case).
const (
	MetadataRateLimitPolicy = "ratelimit-policy"
	MetadataRateLimit       = "ratelimit"
)

// metadata returns the rate-limit metadata of res: one list member per
// limit that the decision enforced, in the method's order. It is nil for
// an opaque method, and for a call that no limiter decided (failed open or
// closed, skipped).
func (m *method) metadata(res enforce.Result) metadata.MD {
	if m.Opaque {
		return nil
	}
	switch res.Outcome {
	case enforce.Allowed, enforce.Denied, enforce.Local:
	default:
		return nil
	}
	ds := fields.Each(res.Decision)
	policy := m.policies.Field(ds)
	return metadata.MD{
		MetadataRateLimitPolicy: {policy},
		MetadataRateLimit:       {fields.QuotaField(ds)},
	}
}

// deny returns the status error of a call that res does not allow:
// codes.Unavailable when the store failed on a fail-closed method,
// codes.ResourceExhausted otherwise, each with a RetryInfo, and for a
// denial of a method that is not opaque a QuotaFailure naming the violated
// policies. hits are what was checked, with the rules in force.
func (m *method) deny(res enforce.Result, hits []enforce.Hit) error {
	switch {
	case res.Outcome == enforce.FailedClosed || res.Outcome == enforce.Errored:
		wait := res.FailRetryAfter()
		return withDetails(status.New(codes.Unavailable,
			fmt.Sprintf("the rate limit could not be checked; retry after %s s", fields.RetryAfter(wait))), retryInfo(wait))
	case m.Opaque:
		wait := m.opaqueRetry
		for _, e := range fields.Each(res.Decision) { // the rule in force may have a longer window
			wait = max(wait, e.Window)
		}
		return withDetails(status.New(codes.ResourceExhausted, "too many requests; retry later"), retryInfo(wait))
	}
	d := res.Decision
	var (
		detail strings.Builder
		qf     errdetails.QuotaFailure
	)
	for _, e := range fields.Each(d) {
		if e.Allowed {
			continue
		}
		desc := m.policies.Quota(e)
		fmt.Fprintf(&detail, "%s (%s); ", desc, e.Policy)
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject: e.Policy, Description: desc, QuotaId: e.Policy, QuotaValue: e.Limit})
	}
	msg := fmt.Sprintf("quota exceeded: %sretry after %s s", detail.String(), fields.RetryAfter(d.RetryAfter))
	return withDetails(status.New(codes.ResourceExhausted, msg), retryInfo(d.RetryAfter), &qf)
}

// retryInfo is the RetryInfo detail of a wait of d.
func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// withDetails returns the error of st with details attached.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	if full, err := st.WithDetails(details...); err == nil {
		st = full
	} // else: cannot happen (the details are well-formed); the code and message stand
	return st.Err()
}
