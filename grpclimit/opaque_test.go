package grpclimit_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A shadow limit never makes a client wait, so its window does not
// lengthen an opaque method's RetryInfo: rolling out a daily limit in
// shadow mode must leave the real denials as they were.
func TestOpaqueRetryIgnoresShadowLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Opaque: true, Limits: []grpclimit.Limit{
			{Rule: rule(t, "op-real", 1, time.Minute), Key: grpclimit.Principal},
			{Rule: rule(t, "op-trial", 100, 24*time.Hour), Key: grpclimit.Principal, Shadow: true},
		}},
	}})
	empty(t, c, withMD(userKey, "alice"))
	a := empty(t, c, withMD(userKey, "alice"))
	if a.st.Code() != codes.ResourceExhausted || a.retry != time.Minute {
		t.Fatalf("denial by the 1/min limit beside a daily shadow one: %v, RetryInfo %v; want ResourceExhausted, 1m0s", a.st.Code(), a.retry)
	}
}

// An opaque method's RetryInfo is the longest window of its enforced
// limits, one that skipped the call included: a call without the
// x-account key, denied by the 1/min limit, waits the hourly limit's
// window, so the answer does not tell which limit denied it.
func TestOpaqueRetryCoversSkippedLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Opaque: true, Limits: []grpclimit.Limit{
			{Rule: rule(t, "os-user", 1, time.Minute), Key: grpclimit.Principal},
			{Rule: rule(t, "os-account", 10, time.Hour), Key: grpclimit.Metadata("x-account")},
		}},
	}})
	empty(t, c, withMD(userKey, "alice"))
	a := empty(t, c, withMD(userKey, "alice"))
	if a.st.Code() != codes.ResourceExhausted || a.retry != time.Hour {
		t.Fatalf("denial by the 1/min limit, the hourly one skipped: %v, RetryInfo %v; want ResourceExhausted, 1h0m0s", a.st.Code(), a.retry)
	}
}
