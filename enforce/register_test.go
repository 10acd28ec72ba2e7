package enforce_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/memstore"
)

// memLimiter returns a Limiter on a memstore, closed when t ends.
func memLimiter(t *testing.T) *floodgate.Limiter {
	t.Helper()
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	lim, err := floodgate.New(ms, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// A second Enforcer on the registerer of another fails with
// one error that names the metric, says how to share it and wraps
// Prometheus's own error; it registers nothing, and the first Enforcer's
// metrics keep working.
func TestSecondEnforcerOnOneRegistererIsOneClearError(t *testing.T) {
	lim, reg := memLimiter(t), prometheus.NewRegistry()
	first, err := enforce.New(enforce.Options{Limiter: lim, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = enforce.New(enforce.Options{Limiter: lim, Registerer: reg})
	if err == nil {
		t.Fatal("a second Enforcer registered the same metrics")
	}
	msg := err.Error()
	if n := strings.Count(msg, "duplicate metrics collector registration attempted"); n != 1 {
		t.Errorf("Prometheus's message appears %d times, want once:\n%s", n, msg)
	}
	for _, want := range []string{"floodgate_decisions_total", "share one among all routes", "WrapRegistererWith"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
		t.Errorf("errors.As finds no prometheus.AlreadyRegisteredError in %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("the registry no longer gathers: %v", err)
	}
	t.Logf("error: %v", msg)
}

// When registering fails part way, the collectors registered before are
// taken back: a later Enforcer on the registerer succeeds.
func TestFailedRegistrationLeavesNothingBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Register the third metric first (the same shape, or the registry
	// would remember the name's shape even once it is unregistered), so
	// that the first two register and the third fails.
	squatter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_store_errors_total",
		Help: "Decisions the store failed, by reason (timeout, breaker_open, full: a memory store with no key it can reclaim, corrupt_state: one key's state is not the store's, error)."}, []string{"gate", "reason"})
	reg.MustRegister(squatter)
	lim := memLimiter(t)
	if _, err := enforce.New(enforce.Options{Limiter: lim, Registerer: reg}); err == nil || !strings.Contains(err.Error(), "floodgate_store_errors_total") {
		t.Fatalf("err = %v, want one naming floodgate_store_errors_total", err)
	}
	// Were the first two left registered, the next Enforcer would collide
	// with them.
	reg.Unregister(squatter)
	en, err := enforce.New(enforce.Options{Limiter: lim, Registerer: reg})
	if err != nil {
		t.Fatalf("an Enforcer on the registerer after a failed New: %v", err)
	}
	en.Close()
}
