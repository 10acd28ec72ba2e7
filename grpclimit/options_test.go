package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
		{name: "neither enforcer nor limiter", opts: grpclimit.Options{}, errs: []string{"set Options.Enforcer or Options.Enforce.Limiter"}},
		{name: "enforcer and its options", opts: grpclimit.Options{Enforce: enforce.Options{Limiter: e.lim}, Enforcer: e.enf},
			errs: []string{"Options.Enforcer and Options.Enforce are both set"}},
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

// A Interceptors with neither Methods nor Default limits nothing, and leaves no
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
	if err := gl.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if a := empty(t, c, withMD()); a.err != nil {
		t.Errorf("after closing a Interceptors on a shared Enforcer: %v", a.err)
	}
	if n := metric(t, e.reg, "floodgate_decisions_total", nil); n != 0 {
		t.Errorf("%v decisions counted", n)
	}
}

// Without an Enforcer, New builds one from the options, registers its
// metrics (only when the methods are good) and Close releases it.
func TestOwnEnforcer(t *testing.T) {
	e := newEnv(t, envOptions{})
	reg := prometheus.NewRegistry()
	good := grpclimit.Options{Enforce: enforce.Options{Limiter: e.lim, Registerer: reg}, Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "own", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	}}
	bad := good
	bad.Methods = map[string]grpclimit.Method{emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "own", 1, time.Minute)}}}}
	if _, err := grpclimit.New(bad); !errors.Is(err, grpclimit.ErrInvalidOptions) {
		t.Fatalf("New(a limit without Key) = %v", err)
	}
	gl, err := grpclimit.New(good) // the refused Options registered nothing
	if err != nil {
		t.Fatal(err)
	}
	c, _ := start(t, grpc.ChainUnaryInterceptor(gl.UnaryServerInterceptor()))
	for _, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		if a := empty(t, c, context.Background()); a.st.Code() != want {
			t.Fatalf("%v, want %v", a.err, want)
		}
	}
	if got := metric(t, reg, "floodgate_decisions_total", map[string]string{"gate": emptyCall}); got != 2 {
		t.Errorf("decisions{gate=EmptyCall} = %v, want 2", got)
	}
	if _, err := grpclimit.New(good); !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Errorf("a second Interceptors on one registerer: %v, want an AlreadyRegisteredError", err)
	}
	if err := gl.Close(); err != nil {
		t.Fatal(err)
	}
}
