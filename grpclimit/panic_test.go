package grpclimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A KeyFunc that panics on some call (user code reading metadata that a
// client controls) must not take the server down: gRPC, unlike net/http,
// recovers no panic, so one crafted call would stop every client. The call
// fails with codes.Internal, the first panic of each limit is logged with
// its stack, and the server keeps serving, the other calls limited as
// before.
func TestPanickingKeyFuncFailsTheCallNotTheServer(t *testing.T) {
	e := newEnv(t, envOptions{})
	fragile := func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "x-tenant")
		return v[0][:3] // panics without the metadata, or on a short value
	}
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "tenant", 2, time.Minute), Key: fragile}}},
	}})
	for i := range 3 {
		if a := empty(t, c, context.Background()); a.st.Code() != codes.Internal {
			t.Fatalf("call %d without x-tenant: %v; want Internal", i, a.err)
		}
	}
	if n := svc.calls(); n != 0 {
		t.Fatalf("%d handlers ran for calls whose key panicked; want none", n)
	}
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if a := empty(t, c, withMD("x-tenant", "acme-1")); a.st.Code() != want {
			t.Fatalf("tenant call %d: %v; want %v (the server still serves and limits)", i, a.err, want)
		}
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "key function panicked"); n != 1 ||
		!strings.Contains(logs, "policy=tenant") || !strings.Contains(logs, "panic_test.go") {
		t.Errorf("logs:\n%s\nwant one line about the panic, with the policy and the stack", logs)
	}
}
