package grpclimit

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/fields"
	"github.com/floodgate-rl/floodgate/internal/report"
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
	if !report.Decided(res.Outcome) {
		return nil
	}
	policy, quota := m.rules.Draft(fields.Each(res.Decision))
	return metadata.MD{
		MetadataRateLimitPolicy: {policy},
		MetadataRateLimit:       {quota},
	}
}

// deny returns the status error of a call that res does not allow:
// codes.Unavailable when the store failed on a fail-closed method,
// codes.ResourceExhausted otherwise, each with a RetryInfo, and for a
// denial of a method that is not opaque a QuotaFailure naming the violated
// policies. hits are what was checked, with the rules in force.
func (m *method) deny(res enforce.Result, hits []enforce.Hit) error {
	switch {
	case report.RefusedByFailure(res.Outcome):
		wait := res.FailRetryAfter()
		return withDetails(status.New(codes.Unavailable,
			fmt.Sprintf("the rate limit could not be checked; retry after %s s", fields.RetryAfter(wait))), retryInfo(wait))
	case m.Opaque:
		return withDetails(status.New(codes.ResourceExhausted, "too many requests; retry later"), retryInfo(m.rules.OpaqueWait(res.Decision)))
	}
	dn := m.rules.Deny(res.Decision)
	var qf errdetails.QuotaFailure
	for _, v := range dn.Violations {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject: v.Policy, Description: v.Quota, QuotaId: v.Policy, QuotaValue: v.Limit})
	}
	msg := "quota exceeded: " + dn.Detail + "retry after " + dn.RetryAfter() + " s"
	return withDetails(status.New(codes.ResourceExhausted, msg), retryInfo(dn.Retry), &qf)
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
