package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A unary method limited per client IP and per principal: every answer
// carries the rate-limit metadata, and the denial has the exact wait and
// the violated policy.
func TestUnaryDenial(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{
			{Rule: rule(t, "ip", 3, time.Minute), Key: grpclimit.ClientIP(nil)},
			{Rule: rule(t, "user", 2, time.Minute), Key: grpclimit.Principal},
		}},
	}})
	const policy = `"ip";q=3;w=60, "user";q=2;w=60`
	alice := withMD(userKey, "alice")
	for i, want := range []string{`"ip";r=2;t=60, "user";r=1;t=60`, `"ip";r=1;t=60, "user";r=0;t=60`} {
		a := empty(t, c, alice)
		if a.err != nil {
			t.Fatalf("call %d: %v", i+1, a.err)
		}
		if got := a.field(t, grpclimit.MetadataRateLimitPolicy); got != policy {
			t.Errorf("call %d: ratelimit-policy %q, want %q", i+1, got, policy)
		}
		if got := a.field(t, grpclimit.MetadataRateLimit); got != want {
			t.Errorf("call %d: ratelimit %q, want %q", i+1, got, want)
		}
		if r := svc.last(t); !r.ok || r.res.Outcome != enforce.Allowed || r.res.Decision.Remaining != int64(1-i) {
			t.Errorf("call %d: the handler found %+v", i+1, r)
		}
	}

	e.clock.Advance(15 * time.Second)
	a := empty(t, c, alice)
	if a.st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", a.err)
	}
	if want := "quota exceeded: 2 requests per 60 s (user); retry after 45 s"; a.st.Message() != want {
		t.Errorf("message %q, want %q", a.st.Message(), want)
	}
	if a.retry != 45*time.Second {
		t.Errorf("RetryInfo %v, want 45s: the user's oldest call leaves the window in 45s", a.retry)
	}
	if a.nquota != 1 || len(a.quota) != 1 {
		t.Fatalf("%d QuotaFailures with %d violations, want 1 with 1", a.nquota, len(a.quota))
	}
	v := a.quota[0]
	if v.GetSubject() != "user" || v.GetQuotaId() != "user" || v.GetDescription() != "2 requests per 60 s" || v.GetQuotaValue() != 2 {
		t.Errorf("violation %v, want subject and quota_id user, 2 requests per 60 s, quota_value 2", v)
	}
	if got, want := a.field(t, grpclimit.MetadataRateLimit), `"ip";r=1;t=60, "user";r=0;t=45`; got != want { // the ip hit, within its limit, reports its reset as if recorded; its count stands
		t.Errorf("denial's ratelimit %q, want %q", got, want)
	}
	if got := a.field(t, grpclimit.MetadataRateLimitPolicy); got != policy {
		t.Errorf("denial's ratelimit-policy %q, want %q", got, policy)
	}
	if n := svc.calls(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}

	// Anonymous: the per-user limit skips it (counted), the per-IP one
	// counts it.
	a = empty(t, c, context.Background())
	if a.err != nil {
		t.Fatal(a.err)
	}
	if got, want := a.field(t, grpclimit.MetadataRateLimit), `"ip";r=0;t=60`; got != want {
		t.Errorf("anonymous call's ratelimit %q, want %q", got, want)
	}
	if got, want := a.field(t, grpclimit.MetadataRateLimitPolicy), `"ip";q=3;w=60`; got != want {
		t.Errorf("anonymous call's ratelimit-policy %q, want %q", got, want)
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"floodgate_decisions_total", map[string]string{"gate": emptyCall, "outcome": "allowed"}, 3},
		{"floodgate_decisions_total", map[string]string{"gate": emptyCall, "outcome": "denied"}, 1},
		{"floodgate_decisions_total", map[string]string{"outcome": "skipped"}, 0},
		{"floodgate_skipped_limits_total", map[string]string{"gate": emptyCall, "policy": "user"}, 1},
		{"floodgate_skipped_limits_total", map[string]string{"policy": "ip"}, 0},
	} {
		if got := metric(t, e.reg, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	if !strings.Contains(e.logs.String(), "skipped a request that has no key") {
		t.Errorf("the skip was not logged: %q", e.logs)
	}
}

// The stream interceptor limits stream opens; the messages of an open
// stream are not counted.
func TestStreamOpensLimited(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		streamCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "streams", 2, time.Minute), Key: grpclimit.ClientIP(nil)}}},
		duplexCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "duplex", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	}})
	ctx := context.Background()
	three := &testpb.StreamingOutputCallRequest{ResponseParameters: make([]*testpb.ResponseParameters, 3)}
	for i, want := range []string{`"streams";r=1;t=60`, `"streams";r=0;t=60`} {
		st, err := c.StreamingOutputCall(ctx, three)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ; ; n++ {
			if _, err := st.Recv(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("stream %d, message %d: %v", i+1, n+1, err)
			}
		}
		if n != 3 {
			t.Errorf("stream %d: %d messages, want 3", i+1, n)
		}
		h, err := st.Header()
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Get(grpclimit.MetadataRateLimit); len(got) != 1 || got[0] != want {
			t.Errorf("stream %d: ratelimit %q, want %q", i+1, got, want)
		}
		if r := svc.last(t); !r.ok || r.res.Outcome != enforce.Allowed {
			t.Errorf("stream %d: the handler's stream context had %+v", i+1, r)
		}
	}
	e.clock.Advance(20 * time.Second)
	st, err := c.StreamingOutputCall(ctx, three)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	h, _ := st.Header()
	a := newAnswer(err, h)
	if a.st.Code() != codes.ResourceExhausted || a.retry != 40*time.Second {
		t.Fatalf("third stream: %v, RetryInfo %v; want ResourceExhausted, 40s", err, a.retry)
	}
	if len(a.quota) != 1 || a.quota[0].GetSubject() != "streams" {
		t.Errorf("third stream's violations %v, want streams", a.quota)
	}
	if got, want := a.field(t, grpclimit.MetadataRateLimit), `"streams";r=0;t=40`; got != want {
		t.Errorf("third stream's ratelimit %q, want %q", got, want)
	}
	if n := svc.calls(); n != 2 {
		t.Errorf("%d stream handlers ran, want 2", n)
	}

	// One bidirectional stream under a limit of one open a minute carries
	// any number of messages; the second open is refused.
	d, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := d.Send(new(testpb.StreamingOutputCallRequest)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Recv(); err != nil {
			t.Fatalf("duplex message %d: %v", i+1, err)
		}
	}
	if err := d.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("duplex end: %v", err)
	}
	d2, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d2.Recv(); newAnswer(err, nil).st.Code() != codes.ResourceExhausted {
		t.Fatalf("second duplex open: %v, want ResourceExhausted", err)
	}
	for gate, want := range map[string][2]float64{streamCall: {2, 1}, duplexCall: {1, 1}} {
		for i, outcome := range []string{"allowed", "denied"} {
			if got := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"gate": gate, "outcome": outcome}); got != want[i] {
				t.Errorf("decisions{gate=%s,outcome=%s} = %v, want %v", gate, outcome, got, want[i])
			}
		}
	}
}

// Methods get their own limits; the others share Default's, under the
// gate "default"; a listed method without limits is exempt.
func TestPerMethodAndDefault(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{
		Methods: map[string]grpclimit.Method{
			emptyCall: {}, // exempt, like a health check
			unaryCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "unary", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
		},
		Default: grpclimit.Method{Limits: []grpclimit.Limit{{Rule: rule(t, "rest", 2, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	})
	ctx := context.Background()
	for i := range 5 {
		a := empty(t, c, ctx)
		if a.err != nil || len(a.header.Get(grpclimit.MetadataRateLimit)) != 0 {
			t.Fatalf("exempt call %d: %v, metadata %v", i+1, a.err, a.header)
		}
		if r := svc.last(t); r.ok {
			t.Fatalf("exempt call %d: the handler found a Result %+v", i+1, r.res)
		}
	}
	if _, err := c.UnaryCall(ctx, new(testpb.SimpleRequest)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnaryCall(ctx, new(testpb.SimpleRequest)); newAnswer(err, nil).st.Code() != codes.ResourceExhausted {
		t.Fatalf("second unary call: %v", err)
	}
	// The two stream methods share the default's count: 2 in all.
	codesOf := func() []codes.Code {
		var out []codes.Code
		st, err := c.StreamingOutputCall(ctx, new(testpb.StreamingOutputCallRequest))
		if err != nil {
			t.Fatal(err)
		}
		if _, err = st.Recv(); errors.Is(err, io.EOF) {
			err = nil
		}
		out = append(out, newAnswer(err, nil).st.Code())
		d, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.CloseSend()
		_, err = d.Recv()
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return append(out, newAnswer(err, nil).st.Code())
	}
	// StreamingOutputCall with no parameters ends at once: OK is io.EOF.
	first := codesOf()
	second := codesOf()
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}
	if got := append(first, second...); !equalCodes(got, want) {
		t.Errorf("default streams: %v, want %v", got, want)
	}
	for _, m := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"gate": grpclimit.DefaultGate, "policy": "rest", "outcome": "allowed"}, 2},
		{map[string]string{"gate": grpclimit.DefaultGate, "policy": "rest", "outcome": "denied"}, 2},
		{map[string]string{"gate": unaryCall, "outcome": "allowed"}, 1},
		{map[string]string{"gate": unaryCall, "outcome": "denied"}, 1},
		{map[string]string{"gate": emptyCall}, 0},
	} {
		if got := metric(t, e.reg, "floodgate_decisions_total", m.labels); got != m.want {
			t.Errorf("decisions%v = %v, want %v", m.labels, got, m.want)
		}
	}
}

func equalCodes(a, b []codes.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The handler finds the Result and may refund all its hits or one
// policy's.
func TestRefund(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		unaryCall: {Limits: []grpclimit.Limit{
			{Rule: rule(t, "ip", 5, time.Minute), Key: grpclimit.ClientIP(nil)},
			{Rule: rule(t, "login", 1, time.Minute), Key: grpclimit.Principal},
		}},
	}})
	for i, step := range []struct {
		refund string // "" for none
		want   string // the ratelimit metadata
		code   codes.Code
	}{
		{"*", `"ip";r=4;t=60, "login";r=0;t=60`, codes.OK},
		{"*", `"ip";r=4;t=60, "login";r=0;t=60`, codes.OK}, // the refund gave both back
		{"login", `"ip";r=4;t=60, "login";r=0;t=60`, codes.OK},
		{"", `"ip";r=3;t=60, "login";r=0;t=60`, codes.OK}, // the login refund kept the ip hit
		{"", `"ip";r=3;t=60, "login";r=0;t=60`, codes.ResourceExhausted},
	} {
		pairs := []string{userKey, "alice"}
		if step.refund != "" {
			pairs = append(pairs, refundKey, step.refund)
		}
		var h metadata.MD
		_, err := c.UnaryCall(withMD(pairs...), new(testpb.SimpleRequest), grpcHeader(&h))
		a := newAnswer(err, h)
		if a.st.Code() != step.code {
			t.Fatalf("call %d: %v, want %v", i+1, err, step.code)
		}
		if got := a.field(t, grpclimit.MetadataRateLimit); got != step.want {
			t.Errorf("call %d: ratelimit %q, want %q", i+1, got, step.want)
		}
	}
}

// A shadow method never denies; its decisions are counted as their own
// outcome and send no metadata. A shadow limit beside an enforced one
// leaves the enforced one's metadata alone.
func TestShadow(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Shadow: true, Limits: []grpclimit.Limit{{Rule: rule(t, "new-limit", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
		unaryCall: {Limits: []grpclimit.Limit{
			{Rule: rule(t, "ip", 10, time.Minute), Key: grpclimit.ClientIP(nil)},
			{Rule: rule(t, "trial", 1, time.Minute), Key: grpclimit.ClientIP(nil), Shadow: true},
		}},
	}})
	ctx := context.Background()
	for i := range 3 {
		a := empty(t, c, ctx)
		if a.err != nil {
			t.Fatalf("shadow call %d: %v", i+1, a.err)
		}
		if len(a.header.Get(grpclimit.MetadataRateLimit))+len(a.header.Get(grpclimit.MetadataRateLimitPolicy)) != 0 {
			t.Errorf("shadow call %d sent rate-limit metadata %v", i+1, a.header)
		}
		r := svc.last(t)
		if !r.ok || r.res.Outcome != enforce.Skipped || len(r.res.Shadow) != 1 || r.res.Shadow[0].Allowed != (i == 0) {
			t.Errorf("shadow call %d: the handler found %+v", i+1, r.res)
		}
	}
	for i := range 2 {
		var h metadata.MD
		_, err := c.UnaryCall(ctx, new(testpb.SimpleRequest), grpcHeader(&h))
		a := newAnswer(err, h)
		if a.err != nil {
			t.Fatalf("unary call %d: %v", i+1, err)
		}
		if got, want := a.field(t, grpclimit.MetadataRateLimitPolicy), `"ip";q=10;w=60`; got != want {
			t.Errorf("unary call %d: ratelimit-policy %q, want %q", i+1, got, want)
		}
	}
	for _, m := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"gate": emptyCall, "policy": "new-limit", "outcome": "shadow_allowed"}, 1},
		{map[string]string{"gate": emptyCall, "policy": "new-limit", "outcome": "shadow_denied"}, 2},
		{map[string]string{"gate": emptyCall, "outcome": "denied"}, 0},
		{map[string]string{"gate": unaryCall, "policy": "trial", "outcome": "shadow_allowed"}, 1},
		{map[string]string{"gate": unaryCall, "policy": "trial", "outcome": "shadow_denied"}, 1},
		{map[string]string{"gate": unaryCall, "policy": "ip", "outcome": "allowed"}, 2},
	} {
		if got := metric(t, e.reg, "floodgate_decisions_total", m.labels); got != m.want {
			t.Errorf("decisions%v = %v, want %v", m.labels, got, m.want)
		}
	}
}

// An opaque method answers every denial alike, whichever limit refused
// it, with its longest window as the wait, and sends no rate-limit
// metadata.
func TestOpaque(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Opaque: true, Limits: []grpclimit.Limit{
			{Rule: rule(t, "login-user", 1, 10*time.Minute), Key: grpclimit.Principal},
			{Rule: rule(t, "login-ip", 3, time.Minute), Key: grpclimit.ClientIP(nil)},
		}},
	}})
	call := func(user string) answer { return empty(t, c, withMD(userKey, user)) }
	var got []answer
	for _, user := range []string{"alice", "bob", "alice", "carol", "dave"} {
		a := call(user)
		if len(a.header.Get(grpclimit.MetadataRateLimit))+len(a.header.Get(grpclimit.MetadataRateLimitPolicy)) != 0 {
			t.Errorf("%s's call sent rate-limit metadata %v", user, a.header)
		}
		got = append(got, a)
	}
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.OK, codes.ResourceExhausted} {
		if got[i].st.Code() != want {
			t.Fatalf("call %d: %v, want %v", i+1, got[i].err, want)
		}
	}
	byUser, byIP := got[2], got[4] // alice's second (login-user), dave's (login-ip)
	if !proto.Equal(byUser.st.Proto(), byIP.st.Proto()) {
		t.Errorf("the denials differ:\n%v\n%v", byUser.st.Proto(), byIP.st.Proto())
	}
	if byUser.retry != 10*time.Minute || byUser.nquota != 0 || byUser.st.Message() != "too many requests; retry later" {
		t.Errorf("opaque denial: RetryInfo %v, %d QuotaFailures, message %q; want 10m0s, none, the fixed message",
			byUser.retry, byUser.nquota, byUser.st.Message())
	}
}

// A client address behind a trusted proxy comes from x-forwarded-for; an
// untrusted peer's x-forwarded-for is ignored.
func TestClientIPBehindProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []string
		want    []codes.Code // for 203.0.113.9, 203.0.113.9, 203.0.113.10
	}{
		{"trusted loopback proxy", []string{"127.0.0.0/8"}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.OK}},
		{"untrusted peer", []string{"192.0.2.0/24"}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			res := mustResolver(t, tc.trusted)
			c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
				emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "ip", 1, time.Minute), Key: grpclimit.ClientIP(res)}}},
			}})
			for i, xff := range []string{"203.0.113.9", "203.0.113.9", "203.0.113.10"} {
				if a := empty(t, c, withMD("x-forwarded-for", xff)); a.st.Code() != tc.want[i] {
					t.Fatalf("call %d from %s: %v, want %v", i+1, xff, a.err, tc.want[i])
				}
			}
			if n := svc.calls(); n != 3-len(slicesOf(tc.want, codes.ResourceExhausted)) {
				t.Errorf("%d handlers ran", n)
			}
		})
	}
}

func slicesOf(cs []codes.Code, c codes.Code) []codes.Code {
	var out []codes.Code
	for _, x := range cs {
		if x == c {
			out = append(out, x)
		}
	}
	return out
}

// A window of fractional seconds is described as Go writes it, and the
// metadata rounds it up.
func TestFractionalWindow(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, _ := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "burst", 1, 1500*time.Millisecond), Key: grpclimit.ClientIP(nil)}}},
	}})
	if a := empty(t, c, context.Background()); a.err != nil || a.field(t, grpclimit.MetadataRateLimitPolicy) != `"burst";q=1;w=2` {
		t.Fatalf("%v, ratelimit-policy %q", a.err, a.field(t, grpclimit.MetadataRateLimitPolicy))
	}
	a := empty(t, c, context.Background())
	if want := "quota exceeded: 1 requests per 1.5s (burst); retry after 2 s"; a.st.Message() != want || a.retry != 1500*time.Millisecond {
		t.Errorf("denial %q, RetryInfo %v; want %q, 1.5s", a.st.Message(), a.retry, want)
	}
	if len(a.quota) != 1 || a.quota[0].GetDescription() != "1 requests per 1.5s" {
		t.Errorf("violations %v", a.quota)
	}
}
