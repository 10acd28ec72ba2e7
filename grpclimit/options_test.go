package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
)

func TestNewRefusesBadOptions(t *testing.T) {
	e := newEnv(t, envOptions{})
	ip := grpclimit.ClientIP(nil)
	ok := func(name string, limit int64) grpclimit.Limit {
		return grpclimit.Limit{Rule: rule(t, name, limit, time.Minute), Key: ip}
	}
	for _, tc := range []struct {
		name     string
		opts     grpclimit.Options
		errs     []string // substrings, one per problem
		enforced bool     // an error also wraps enforce.ErrInvalid
	}{
		{name: "no enforcer", opts: grpclimit.Options{Methods: map[string]grpclimit.Method{emptyCall: {Limits: []grpclimit.Limit{ok("a", 1)}}}},
			errs: []string{"Options.Enforcer is nil: build one with enforce.New"}},
		{name: "bad method names", opts: grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
			"EmptyCall":                           {Limits: []grpclimit.Limit{ok("a", 1)}},
			"/grpc.testing.TestService/":          {Limits: []grpclimit.Limit{ok("a", 1)}},
			"/grpc.testing.TestService/Empty/Now": {Limits: []grpclimit.Limit{ok("a", 1)}},
		}}, errs: []string{`method "/grpc.testing.TestService/" is not`, `method "/grpc.testing.TestService/Empty/Now" is not`, `method "EmptyCall" is not`}},
		{name: "every bad limit listed", opts: grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
			emptyCall: {Opaque: true, MaxDelay: time.Second, Limits: []grpclimit.Limit{
				{Rule: rule(t, "a", 1, time.Minute)}, ok("b", 1), ok("b", 1)}},
		}}, errs: []string{"Opaque cannot be combined with MaxDelay", `Limits[0] ("a") has no Key`, `limit 2: rule b appears twice`}, enforced: true},
		{name: "default settings without limits", opts: grpclimit.Options{Enforcer: e.enf, Default: grpclimit.Method{Failure: enforce.FailClosed}},
			errs: []string{"Default has settings but no Limits"}},
		{name: "a shadow default without limits", opts: grpclimit.Options{Enforcer: e.enf, Default: grpclimit.Method{Shadow: true}},
			errs: []string{"Default has settings but no Limits"}},
		{name: "an opaque default without limits", opts: grpclimit.Options{Enforcer: e.enf, Default: grpclimit.Method{Opaque: true}},
			errs: []string{"Default has settings but no Limits"}},
		{name: "a throttled default without limits", opts: grpclimit.Options{Enforcer: e.enf, Default: grpclimit.Method{MaxDelay: time.Second}},
			errs: []string{"Default has settings but no Limits"}},
		{name: "one name, two rules", opts: grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
			emptyCall: {Limits: []grpclimit.Limit{ok("shared", 2)}},
			unaryCall: {Limits: []grpclimit.Limit{ok("shared", 100)}},
		}}, errs: []string{`"shared"`}, enforced: true},
		{name: "the default's rule against a method's", opts: grpclimit.Options{Enforcer: e.enf,
			Methods: map[string]grpclimit.Method{emptyCall: {Limits: []grpclimit.Limit{ok("other", 2)}}},
			Default: grpclimit.Method{Limits: []grpclimit.Limit{ok("other", 3)}},
		}, errs: []string{`gate "default"`}, enforced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gl, err := grpclimit.New(tc.opts)
			if err == nil || gl != nil {
				t.Fatalf("New = %v, %v; want an error", gl, err)
			}
			if !errors.Is(err, grpclimit.ErrInvalidOptions) {
				t.Errorf("%v does not wrap ErrInvalidOptions", err)
			}
			if tc.enforced != errors.Is(err, enforce.ErrInvalid) {
				t.Errorf("errors.Is(%v, enforce.ErrInvalid) = %v, want %v", err, !tc.enforced, tc.enforced)
			}
			msg := err.Error()
			for _, s := range tc.errs {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not say %q", msg, s)
				}
			}
			if n := len(strings.Split(msg, "\n")); n != len(tc.errs) {
				t.Errorf("%d problems reported, want %d: %q", n, len(tc.errs), msg)
			}
		})
	}
}

// An Interceptors with neither Methods nor Default limits nothing, and leaves no
// Result in the handler's context.
func TestNoLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{})
	for range 3 {
		if a := empty(t, c, withMD()); a.err != nil || len(a.header.Get(grpclimit.MetadataRateLimit)) != 0 {
			t.Fatalf("%v, metadata %v", a.err, a.header)
		}
	}
	if r := svc.last(t); r.ok {
		t.Errorf("the handler found a Result %+v", r.res)
	}
	st, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{ResponseParameters: make([]*testpb.ResponseParameters, 2)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := st.Recv(); err != nil {
			t.Fatalf("unlimited stream, message %d: %v", i+1, err)
		}
	}
	if r := svc.last(t); r.ok {
		t.Errorf("the stream handler found a Result %+v", r.res)
	}
	gl, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf})
	if err != nil {
		t.Fatal(err)
	}
	if err := gl.Limit(context.Background()); err != nil {
		t.Errorf("Limit with nothing to limit: %v", err)
	}
	if n := metric(t, e.reg, "floodgate_decisions_total", nil); n != 0 {
		t.Errorf("%v decisions counted", n)
	}
}
