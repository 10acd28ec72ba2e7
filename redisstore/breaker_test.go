package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// frozen is a Redis that accepts calls and never answers: each waits out
// its caller's deadline.
type frozen struct{}

func (frozen) Eval(ctx context.Context, _ redisstore.Script, _, _ []string) ([]int64, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (frozen) Del(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
func (frozen) Ping(ctx context.Context) error          { <-ctx.Done(); return ctx.Err() }
func (frozen) Cluster() bool                           { return false }

// A store guards itself with a circuit breaker out of the box: the quick
// start's store (goredisadapter.NewStore builds it the same way) stops
// asking a frozen Redis after a few failures, so an outage does not cost
// every request the whole budget. With NoBreaker,
// every request waits out its budget.
// breakerFailures is breakerstore's default Options.Failures.
const breakerFailures = 5

func TestBreakerOnByDefault(t *testing.T) {
	rule := floodgate.Rule{Name: "frozen", Limit: 5, Window: time.Minute}
	for _, noBreaker := range []bool{false, true} {
		st, err := redisstore.New(context.Background(), redisstore.Options{Conn: frozen{}, NoBreaker: noBreaker})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.New(st, floodgate.Options{Timeout: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var open, timedOut int
		for i := range 3 * breakerFailures {
			_, err := lim.Allow(context.Background(), rule, "k")
			switch {
			case errors.Is(err, breakerstore.ErrOpen):
				open++
			case errors.Is(err, context.DeadlineExceeded):
				timedOut++
				if open > 0 {
					t.Fatalf("NoBreaker=%v: call %d waited out its budget after the breaker opened", noBreaker, i)
				}
			default:
				t.Fatalf("NoBreaker=%v: %v; want a timeout or an open breaker", noBreaker, err)
			}
		}
		st.Close()
		// The breaker opens after its default 5 misses that it counts
		// as the store's (a miss while this process is short of CPU is
		// not counted: see breakerstore), within the first two thirds.
		if noBreaker && open != 0 || !noBreaker && (open < breakerFailures || timedOut < breakerFailures) {
			t.Errorf("NoBreaker=%v: %d answered by the open breaker, %d timed out", noBreaker, open, timedOut)
		}
		if got := st.State(); (got == breakerstore.Open) == noBreaker {
			t.Errorf("NoBreaker=%v: state %v", noBreaker, got)
		}
	}
}

// refusing is a Redis that refuses every call at once (a dead node), and
// that the test turns into a Cluster: the store learns that it talks to a
// Cluster only at its client's first connection.
type refusing struct{ cluster *atomic.Bool }

func (refusing) Eval(context.Context, redisstore.Script, []string, []string) ([]int64, error) {
	return nil, fmt.Errorf("%w: connection refused", floodgate.ErrStoreUnavailable)
}
func (refusing) Del(context.Context, string) error { return floodgate.ErrStoreUnavailable }
func (refusing) Ping(context.Context) error        { return floodgate.ErrStoreUnavailable }
func (r refusing) Cluster() bool                   { return r.cluster.Load() }

// A breaker opened before the store learnt it talks to a Cluster, where
// it calls Redis without one, no longer guards it: State, which
// floodgate_breaker_state and readiness probes read, says Closed, and
// calls reach Redis instead of failing as the open breaker's.
func TestBreakerOfAClusterIsNotReportedOpen(t *testing.T) {
	var cluster atomic.Bool
	st, err := redisstore.New(context.Background(), redisstore.Options{Conn: refusing{&cluster}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := floodgate.Rule{Name: "r", Limit: 1, Window: time.Minute}
	take := func() error {
		_, err := st.Take(context.Background(), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
		return err
	}
	for range breakerFailures {
		take()
	}
	if err := take(); !errors.Is(err, breakerstore.ErrOpen) || st.State() != breakerstore.Open {
		t.Fatalf("before the store knows it is a Cluster: %v, state %v; want the breaker open", err, st.State())
	}
	cluster.Store(true)
	if err := take(); errors.Is(err, breakerstore.ErrOpen) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("on a Cluster: %v; want Redis's own failure, not the breaker's", err)
	}
	if got := st.State(); got != breakerstore.Closed {
		t.Errorf("on a Cluster, State = %v; want Closed: no breaker guards the store", got)
	}
}
