package enforce_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
)

// The local limits that stand in for a failed store apply the Limiter's
// overrides: a key with a limit of its own keeps it during an outage.
func TestLocalLimitsKeepOverrides(t *testing.T) {
	api := rule("api", 2)
	set, err := overrides.NewSet(overrides.Entry{Rule: rule("api", 4), Key: "vip"})
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	fault := faultstore.New(ms)
	lim, err := floodgate.New(fault, floodgate.Options{Timeout: 20 * time.Millisecond, Overrides: set})
	if err != nil {
		t.Fatal(err)
	}
	e, err := enforce.New(enforce.Options{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	g, err := e.Gate(enforce.Spec{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	fault.Set(faultstore.Fail)
	for key, want := range map[string]int{"vip": 4, "plain": 2} {
		n := 0
		for range 10 {
			res, err := g.Check(t.Context(), []enforce.Hit{hit(api, key, enforce.FailLocal)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != enforce.Local {
				t.Fatalf("%s: outcome %v; want local", key, res.Outcome)
			}
			if res.Allowed() {
				n++
			}
		}
		if n != want {
			t.Errorf("%s: local limits admitted %d of 10; want %d", key, n, want)
		}
	}
}
