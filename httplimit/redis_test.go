package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestRedisOutage runs the three failure modes against a real
// redis-server that dies (SIGKILL, then a restart with its data gone) or
// freezes (SIGSTOP, then SIGCONT) in the middle of the test, with a
// breaker in front of the store. Every request must be answered within
// the decision budget, by the route's failure mode, and once Redis is back
// the decisions must come from Redis again without touching the app.
func TestRedisOutage(t *testing.T) {
	const budget = 30 * time.Millisecond
	for _, tc := range []struct {
		name         string
		fail, revive func(*redistest.Server) error
	}{
		{"killed", func(s *redistest.Server) error { s.Kill(); return nil }, (*redistest.Server).Restart},
		{"stopped", (*redistest.Server).Stop, (*redistest.Server).Cont},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			rs, err := redisstore.New(ctx, redisstore.Options{URL: srv.URL(), NoBreaker: true}) // the test puts its own in front
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			bs, err := breakerstore.New(rs, breakerstore.Options{Failures: 3, Cooldown: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			// Warm up: the first script call loads the script (EVALSHA,
			// NOSCRIPT, EVAL), which a loaded machine may stretch past the
			// 30ms budget of the decisions below.
			warm, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := rs.Peek(warm, []floodgate.Hit{{Rule: rule(t, "warm-up", 1, time.Minute), Key: "k", Cost: 1}}); err != nil {
				t.Fatal(err)
			}
			cancel()
			e := newEnv(t, envOptions{store: bs, timeout: budget, breaker: bs})
			hs := modes(t, e)
			fromRedis := func() float64 {
				return metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "allowed"}) +
					metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "denied"})
			}

			for m, h := range hs {
				rec := do(h, "192.0.2.1:1")
				if rec.Code != 200 {
					t.Fatalf("%v route, Redis up: %d", m, rec.Code)
				}
				wantList(t, rec.Header(), "RateLimit", fmt.Sprintf("r-%v;r=1;t=60", m))
			}
			if n := fromRedis(); n != 3 {
				t.Fatalf("%v decisions from Redis, want 3", n)
			}

			if err := tc.fail(srv); err != nil {
				t.Fatal(err)
			}
			// First concurrent requests: those in flight while the breaker
			// trips all wait for their budget, none longer.
			var (
				worst time.Duration
				wg    sync.WaitGroup
				mu    sync.Mutex
			)
			for range 8 {
				wg.Go(func() {
					for range 20 {
						start := time.Now()
						do(hs[enforce.FailOpen], "192.0.2.2:1")
						mu.Lock()
						worst = max(worst, time.Since(start))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for i := range 50 {
				for m, h := range hs {
					start := time.Now()
					rec := do(h, "192.0.2.1:1")
					worst = max(worst, time.Since(start))
					want := map[enforce.FailureMode]int{enforce.FailClosed: 429, enforce.FailOpen: 200, enforce.FailLocal: 200}[m]
					if m == enforce.FailLocal && i >= 2 {
						want = 429
					}
					if rec.Code != want {
						t.Fatalf("%v route, Redis %s, request %d: %d, want %d", m, tc.name, i+1, rec.Code, want)
					}
				}
				if i%10 == 0 {
					time.Sleep(30 * time.Millisecond) // let the breaker's cooldown end now and then: probes must stay within budget too
				}
			}
			if n := fromRedis(); n != 3 {
				t.Errorf("%v decisions from Redis while it was %s", n-3, tc.name)
			}
			opened := metric(t, e.reg, "floodgate_store_errors_total", map[string]string{"reason": "breaker_open"})
			t.Logf("Redis %s: worst decision %v (budget %v); %v of 310 decisions failed fast on the open breaker; breaker now %v",
				tc.name, worst, budget, opened, bs.State())
			if worst > budget+slack {
				t.Errorf("a request waited %v with Redis %s; the budget is %v", worst, tc.name, budget)
			}
			if opened == 0 {
				t.Errorf("the breaker never opened")
			}

			if err := tc.revive(srv); err != nil {
				t.Fatal(err)
			}
			before := fromRedis()
			deadline := time.Now().Add(10 * time.Second)
			for bs.State() != breakerstore.Closed || fromRedis() == before {
				if time.Now().After(deadline) {
					t.Fatalf("Redis %s and back: breaker %v, still no decision from Redis after 10s", tc.name, bs.State())
				}
				do(hs[enforce.FailOpen], "192.0.2.1:1")
				time.Sleep(10 * time.Millisecond)
			}
			locals := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "local"})
			rec := do(hs[enforce.FailLocal], "192.0.2.9:1")
			if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != `"r-local";r=1;t=60` {
				t.Fatalf("local route after recovery: %d %v", rec.Code, rec.Header())
			}
			if n := metric(t, e.reg, "floodgate_decisions_total", map[string]string{"outcome": "local"}); n != locals {
				t.Fatalf("the local limits still decide after Redis came back")
			}
		})
	}
}
