package enforce_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/internal/promtest"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A hit built by hand with a failure mode that does not exist (a value
// from an unchecked configuration) is the caller's error, refused whether
// or not the store answers, never silently FailOpen while the store is
// down. Nothing is recorded or counted.
func TestUnknownFailureModeIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode faultstore.Mode
	}{{"store up", faultstore.Pass}, {"store down", faultstore.Fail}} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			g := v.gate(t, enforce.Spec{Name: "modes"})
			r := rule("r", 1)
			v.fault.Set(tc.mode)
			bad := []enforce.Hit{hit(r, "k", enforce.FailOpen), hit(r, "other", enforce.FailureMode(7))}
			res, err := g.Check(t.Context(), bad)
			if !errors.Is(err, enforce.ErrInvalid) || res.Outcome != enforce.FailedClosed || res.Allowed() {
				t.Errorf("Check with mode 7: %v (allowed %v), %v; want failed_closed and an error wrapping ErrInvalid", res.Outcome, res.Allowed(), err)
			}
			if n := v.metric(t, "floodgate_store_errors_total", nil) + v.metric(t, "floodgate_decisions_total", nil); n != 0 {
				t.Errorf("%v store errors and decisions counted, want none", n)
			}
			v.fault.Set(faultstore.Pass)
			if res, err := g.Check(t.Context(), []enforce.Hit{hit(r, "k", enforce.FailClosed)}); err != nil || !res.Allowed() {
				t.Errorf("the valid hit afterwards: %v, %v; want allowed (nothing was recorded)", res.Outcome, err)
			}
		})
	}
}

// A memory store full of keys that still weigh refuses a new one, and
// the route's failure mode answers; the refusal is counted as the store
// being full, not as an error of unknown cause.
func TestFullMemoryStoreIsCounted(t *testing.T) {
	// MaxKeys 1 is one key per shard: of 65 distinct keys, two share one
	// of the 64 shards, so some key among them is refused.
	ms := memstore.New(memstore.Options{MaxKeys: 1})
	t.Cleanup(func() { ms.Close() })
	lim, err := floodgate.New(ms, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := enforce.New(enforce.Options{Limiter: lim, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	day := floodgate.Rule{Name: "daily", Limit: 5, Window: 24 * time.Hour, Algorithm: floodgate.FixedWindow}
	g, err := e.Gate(enforce.Spec{Name: "full", Failure: enforce.FailClosed, Limits: []enforce.Limit{{Rule: day}}})
	if err != nil {
		t.Fatal(err)
	}
	refused := -1
	for i := 0; i <= 64 && refused < 0; i++ {
		res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{fmt.Sprint("client-", i)}))
		switch {
		case err == nil && res.Outcome == enforce.FailedClosed:
			refused = i
		case err != nil || res.Outcome != enforce.Allowed:
			t.Fatalf("client %d: %v, %v; want allowed until the store is full, then failed_closed", i, res.Outcome, err)
		}
	}
	if refused < 1 {
		t.Fatalf("refused client %d; want one of clients 1 to 64 refused (the first key always fits)", refused)
	}
	if got := promtest.Sum(t, reg, "floodgate_store_errors_total", map[string]string{"gate": "full", "reason": "full"}); got != 1 {
		t.Errorf("store errors of reason full = %v, want 1", got)
	}
}

// corruptStore fails every take as a store fails on one key's corrupt
// state.
type corruptStore struct{ floodgate.Store }

func (corruptStore) Take(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, fmt.Errorf("redisstore: %w: rule \"r\": malformed state", floodgate.ErrCorruptState)
}

// One key's corrupt state is counted as such, not as an error of unknown
// cause, and the gate's failure mode answers.
func TestCorruptStateIsCounted(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	lim, err := floodgate.New(corruptStore{ms}, floodgate.Options{Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := enforce.New(enforce.Options{Limiter: lim, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	g, err := e.Gate(enforce.Spec{Name: "corrupt", Failure: enforce.FailError, Limits: []enforce.Limit{{Rule: floodgate.Rule{Name: "r", Limit: 5, Window: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); err != nil || res.Outcome != enforce.Errored || !errors.Is(res.Err, floodgate.ErrCorruptState) {
		t.Fatalf("%v, %v, %v; want Errored with the corrupt state", res.Outcome, res.Err, err)
	}
	if got := promtest.Sum(t, reg, "floodgate_store_errors_total", map[string]string{"gate": "corrupt", "reason": "corrupt_state"}); got != 1 {
		t.Errorf("store errors of reason corrupt_state = %v, want 1", got)
	}
}
