package grpclimit_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// redisStore returns a store on the Redis at url under a fresh key
// prefix, warmed up: the first script call loads the script, which a
// loaded machine may stretch past a decision's budget.
func redisStore(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	ctx := context.Background()
	rs, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: "grpclimit-" + rand.Text()[:8] + ":", NoBreaker: true}) // the tests put their own in front
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	warm, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := rs.Peek(warm, []floodgate.Hit{{Rule: rule(t, "warm-up", 1, time.Minute), Key: "k", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	return rs
}

// Against a real Redis: the exact figures of unary calls and stream opens.
func TestRedis(t *testing.T) {
	// The Redis of FLOODGATE_REDIS_ADDR, or one of its own: redistest's
	// shared server would outlive the test binary's goroutine check.
	url := "redis://" + os.Getenv(redistest.EnvAddr)
	if url == "redis://" {
		url = redistest.Start(t).URL()
	}
	e := newEnv(t, envOptions{store: redisStore(t, url), timeout: time.Second})
	c, svc := e.serve(t, grpclimit.Options{Methods: map[string]grpclimit.Method{
		emptyCall:  {Limits: []grpclimit.Limit{{Rule: rule(t, "user", 2, time.Minute), Key: grpclimit.Principal}}},
		streamCall: {Limits: []grpclimit.Limit{{Rule: rule(t, "streams", 1, time.Minute), Key: grpclimit.Principal}}},
	}})
	alice := withMD(userKey, "alice")
	for i, want := range []string{`"user";r=1;t=60`, `"user";r=0;t=60`} {
		a := empty(t, c, alice)
		if a.err != nil {
			t.Fatalf("call %d: %v", i+1, a.err)
		}
		if got := a.field(t, grpclimit.MetadataRateLimit); got != want {
			t.Errorf("call %d: ratelimit %q, want %q", i+1, got, want)
		}
	}
	first := time.Now()
	a := empty(t, c, alice)
	if a.st.Code() != codes.ResourceExhausted || len(a.quota) != 1 || a.quota[0].GetSubject() != "user" {
		t.Fatalf("third call: %v, violations %v; want ResourceExhausted by user", a.err, a.quota)
	}
	// Redis's clock: the first call left the window a minute after it
	// was recorded, which is between the test's first call and now.
	if a.retry > time.Minute || a.retry < time.Minute-time.Since(first)-time.Second {
		t.Errorf("RetryInfo %v, want just under 1m0s", a.retry)
	}
	if a := empty(t, c, withMD(userKey, "bob")); a.err != nil {
		t.Errorf("bob, after alice's denial: %v", a.err)
	}

	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		st, err := c.StreamingOutputCall(alice, new(testpb.StreamingOutputCallRequest))
		if err != nil {
			t.Fatal(err)
		}
		if _, err = st.Recv(); errors.Is(err, io.EOF) {
			err = nil
		}
		if got := newAnswer(err, nil).st.Code(); got != want {
			t.Errorf("stream %d: %v, want %v", i+1, err, want)
		}
	}
	if n := svc.calls(); n != 4 {
		t.Errorf("%d handlers ran, want 4 (alice twice, bob, one stream)", n)
	}
}

// A real redis-server killed and restarted under the three failure modes,
// with a breaker in front of the store: every call is answered within the
// budget by its method's mode, and the store decides again once Redis is
// back.
func TestRedisOutage(t *testing.T) {
	const budget = 30 * time.Millisecond
	srv := redistest.Start(t)
	rs := redisStore(t, srv.URL())
	bs, err := breakerstore.New(rs, breakerstore.Options{Failures: 3, Cooldown: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{store: bs, timeout: budget, opts: enforce.Options{Breaker: bs}})
	c, _ := e.serve(t, modes(t))
	fromRedis := func() float64 {
		return metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "allowed"}) +
			metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "denied"})
	}
	for m, a := range calls(t, c) {
		if a.err != nil {
			t.Fatalf("%v method, Redis up: %v", m, a.err)
		}
	}

	srv.Kill()
	var worst time.Duration
	for i := range 20 {
		start := time.Now()
		got := calls(t, c)
		worst = max(worst, time.Since(start)/3)
		if a := got[enforce.FailClosed]; a.st.Code() != codes.Unavailable || a.retry < grpclimit.MinFailRetryAfter {
			t.Fatalf("closed method, Redis down, call %d: %v, RetryInfo %v", i+1, a.err, a.retry)
		}
		if a := got[enforce.FailOpen]; a.err != nil {
			t.Fatalf("open method, Redis down, call %d: %v", i+1, a.err)
		}
		want := codes.OK
		if i >= 2 {
			want = codes.ResourceExhausted // the local limits: 2 per minute
		}
		if a := got[enforce.FailLocal]; a.st.Code() != want {
			t.Fatalf("local method, Redis down, call %d: %v, want %v", i+1, a.err, want)
		}
	}
	opened := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"reason": "breaker_open"})
	t.Logf("Redis killed: worst call %v (budget %v); %v of 60 decisions failed fast on the open breaker", worst, budget, opened)
	if worst > budget+slack {
		t.Errorf("a call took %v with Redis down; the budget is %v", worst, budget)
	}
	if opened == 0 {
		t.Errorf("the breaker never opened")
	}
	if n := fromRedis(); n != 3 {
		t.Errorf("%v decisions from Redis, want the 3 before it died", n)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fromRedis() == 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no decision from Redis 10s after its restart; breaker %v", bs.State())
		}
		time.Sleep(10 * time.Millisecond)
		calls(t, c)
	}
	if a := calls(t, c)[enforce.FailClosed]; a.err != nil {
		t.Errorf("closed method after recovery: %v", a.err) // Redis restarted empty
	}
}
