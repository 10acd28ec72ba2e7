package enforce_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
)

func inFlight(name string, limit int64, ttl time.Duration) floodgate.Rule {
	return floodgate.Rule{Name: name, Limit: limit, Window: ttl, Algorithm: floodgate.Concurrency}
}

// A held lease is renewed past its time to live, holds its slot until
// released (once, however often release is called), and counts in
// floodgate_leases_held meanwhile.
func TestHoldRenewsUntilRelease(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: inFlight("jobs", 1, 300*time.Millisecond)}}})
	res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"tenant"}))
	if err != nil || !res.Allowed() {
		t.Fatalf("first: %v, %v", res.Outcome, err)
	}
	release := res.Hold(t.Context())
	held := map[string]string{"gate": "jobs", "policy": "jobs"}
	if got := v.metric(t, "floodgate_leases_held", held); got != 1 {
		t.Fatalf("floodgate_leases_held = %v while held, want 1", got)
	}
	time.Sleep(time.Second) // three times the time to live: renewals hold it
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"tenant"})); res.Allowed() {
		t.Fatalf("past the time to live, while held: %v; a held lease must be renewed", res.Outcome)
	}
	release()
	release()
	calls := v.fault.Calls()
	time.Sleep(300 * time.Millisecond) // three renewal periods
	if got := v.fault.Calls(); got != calls {
		t.Fatalf("%d store calls after the release; a renewal must never outlive its holder's release", got-calls)
	}
	next, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"tenant"}))
	if err != nil || !next.Allowed() {
		t.Fatalf("after release: %v, %v; a released lease frees its slot", next.Outcome, err)
	}
	defer next.Hold(t.Context())()
	release() // a third release of the first lease frees nothing
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"tenant"})); res.Allowed() {
		t.Fatalf("after the first lease was released again: %v; want denied", res.Outcome)
	}
	for name, want := range map[string]float64{"floodgate_leases_held": 1, "floodgate_leases_expired_total": 0, "floodgate_lease_renewals_failed_total": 0} {
		if got := v.metric(t, name, held); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// A renewal that finds its lease gone (here: reset, as a time to live run
// out would) fails, is counted, and takes nothing back; one whose store
// call fails is counted and tried again.
func TestHoldCountsFailedRenewals(t *testing.T) {
	v := newEnv(t)
	r := inFlight("jobs", 1, 60*time.Millisecond)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: r}}})
	labels := map[string]string{"gate": "jobs", "policy": "jobs"}

	res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"a"}))
	release := res.Hold(t.Context())
	admin, err := floodgate.New(v.fault, floodgate.Options{}) // an operator's unlock, from another process
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Reset(t.Context(), r, "a"); err != nil {
		t.Fatal(err)
	}
	other, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"a"})) // takes the freed slot
	releaseOther := other.Hold(t.Context())
	time.Sleep(100 * time.Millisecond)
	if got := v.metric(t, "floodgate_lease_renewals_failed_total", labels); got != 1 {
		t.Fatalf("renewals failed = %v after the lease was reset, want 1 (then no more tries)", got)
	}
	if got := v.metric(t, "floodgate_leases_expired_total", labels); got != 1 {
		t.Fatalf("leases expired = %v, want 1", got)
	}
	release()
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"a"})); res.Allowed() {
		t.Fatalf("with the new holder's lease: %v; the lost lease's renewal and release must not free it", res.Outcome)
	}
	releaseOther()

	res, _ = g.Check(t.Context(), g.Hits(t.Context(), []string{"b"}))
	release = res.Hold(t.Context())
	v.fault.Set(faultstore.Fail)
	time.Sleep(200 * time.Millisecond)
	v.fault.Set(faultstore.Pass)
	release()
	if got := v.metric(t, "floodgate_lease_renewals_failed_total", labels); got < 1+2 {
		t.Fatalf("renewals failed = %v after 200ms of a failing store, renewing every 20ms; want the first lease's and at least 2: a failed renewal is tried again", got)
	}
	if got := v.metric(t, "floodgate_leases_expired_total", labels); got != 2 {
		// The first lease, and the second: released after its time to
		// live ran out unrenewed.
		t.Fatalf("leases expired = %v, want 2", got)
	}
	if got := v.metric(t, "floodgate_leases_held", labels); got != 0 {
		t.Fatalf("leases held = %v after every release, want 0", got)
	}
}

// A request throttled by a concurrency limit waits for a slot, and a
// release in this process wakes it at once, not at its next poll.
func TestThrottleWaitsForARelease(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: inFlight("jobs", 1, time.Hour)}}, MaxDelay: time.Minute})
	first, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	release := first.Hold(t.Context())
	type answer struct {
		res enforce.Result
		err error
		at  time.Time
	}
	done := make(chan answer)
	go func() {
		res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
		done <- answer{res, err, time.Now()}
	}()
	// The second request waits; its polls come every 250ms (an eighth of
	// MaxDelay, at most 250ms), so the one after the release comes about
	// 200ms after it.
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	release()
	a := <-done
	if a.err != nil || !a.res.Allowed() {
		t.Fatalf("the throttled request: %v, %v; want admitted once the slot is released", a.res.Outcome, a.err)
	}
	a.res.Hold(t.Context())()
	if woke := a.at.Sub(released); woke > 100*time.Millisecond {
		t.Errorf("admitted %v after the release; a release must wake the waiting requests", woke)
	}
	if got := v.metric(t, "floodgate_throttled_total", map[string]string{"result": "allowed"}); got != 1 {
		t.Errorf("floodgate_throttled_total{result=allowed} = %v, want 1", got)
	}

	// With the holder gone elsewhere, the waiting request's deadline ends
	// the wait with the denial.
	held, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	defer held.Hold(t.Context())()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if res, err := g.Check(ctx, g.Hits(ctx, []string{"k"})); err == nil && res.Allowed() {
		t.Fatalf("while held: %v", res.Outcome)
	}
}

// With the store down, FailLocal counts the holders of this replica in
// its local limits, and releases them there.
func TestLocalLimitsCountHolders(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: inFlight("jobs", 1, time.Minute)}}, Failure: enforce.FailLocal})
	v.fault.Set(faultstore.Fail)
	first, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	if err != nil || first.Outcome != enforce.Local || !first.Allowed() {
		t.Fatalf("first, the store down: %v (allowed %v), %v; want admitted by the local limits", first.Outcome, first.Allowed(), err)
	}
	release := first.Hold(t.Context())
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); res.Outcome != enforce.Local || res.Allowed() {
		t.Fatalf("a second holder: %v (allowed %v); want denied by the local limits", res.Outcome, res.Allowed())
	}
	release()
	if res, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); res.Outcome != enforce.Local || !res.Allowed() {
		t.Fatalf("after the release: %v (allowed %v); want admitted by the local limits", res.Outcome, res.Allowed())
	}
}

// A shadow limit on requests in flight counts holders too: its leases are
// held and released with the request's.
func TestHoldReleasesShadowLeases(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: inFlight("jobs", 1, time.Minute), Shadow: true}}})
	first, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	if len(first.Shadow) != 1 || !first.Shadow[0].Allowed {
		t.Fatalf("first: shadow %+v", first.Shadow)
	}
	release := first.Hold(t.Context())
	if second, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); !second.Allowed() || len(second.Shadow) != 1 || second.Shadow[0].Allowed {
		t.Fatalf("second, while the first holds: allowed %v, shadow %+v; want allowed, the shadow limit denying", second.Allowed(), second.Shadow)
	}
	release()
	if third, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"})); len(third.Shadow) != 1 || !third.Shadow[0].Allowed {
		t.Fatalf("third, after the release: shadow %+v; want the shadow limit allowing", third.Shadow)
	}
	if got := v.metric(t, "floodgate_decisions_total", map[string]string{"outcome": "shadow_denied"}); got != 1 {
		t.Errorf("shadow_denied = %v, want 1", got)
	}
}

// A handler's Refund (the account's attempt after a successful login)
// undoes the request's rate hits, never its lease: the request still
// runs, and holds its slot until it ends.
func TestRefundKeepsTheLease(t *testing.T) {
	v := newEnv(t)
	g := v.gate(t, enforce.Spec{Name: "login", Limits: []enforce.Limit{{Rule: rule("attempts", 2)}, {Rule: inFlight("inflight", 1, time.Minute)}}})
	res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"ana", "ana"}))
	if err != nil || !res.Allowed() {
		t.Fatalf("first: %v, %v", res.Outcome, err)
	}
	release := res.Hold(t.Context())
	if err := res.Refund(t.Context()); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"ana", "ana"})); again.Allowed() || again.Decision.Policy != "inflight" {
		t.Fatalf("while the first runs, after its Refund: %v by %s; want denied by the concurrency limit", again.Outcome, again.Decision.Policy)
	}
	release()
	for i := range 2 { // the refunded attempt left both of the rate's
		next, _ := g.Check(t.Context(), g.Hits(t.Context(), []string{"ana", "ana"}))
		if !next.Allowed() {
			t.Fatalf("request %d after the release: %v by %s", i+1, next.Outcome, next.Decision.Policy)
		}
		next.Hold(t.Context())()
	}
}

// A request throttled by a concurrency limit sees a slot that another
// process released at its next check: it polls, an eighth of MaxDelay
// apart (within 10ms and 250ms).
func TestThrottleSeesAnotherProcessRelease(t *testing.T) {
	v := newEnv(t)
	spec := enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: inFlight("jobs", 1, time.Hour)}}, MaxDelay: 800 * time.Millisecond}
	g := v.gate(t, spec)
	other, err := floodgate.New(v.fault, floodgate.Options{}) // another replica, on the same store
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.Check(t.Context(), floodgate.Hit{Rule: spec.Limits[0].Rule, Key: "k"})
	if err != nil || !held.Allowed {
		t.Fatalf("the other replica's lease: %+v, %v", held, err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = other.Refund(context.Background(), held)
	}()
	start := time.Now()
	res, err := g.Check(t.Context(), g.Hits(t.Context(), []string{"k"}))
	if err != nil || !res.Allowed() {
		t.Fatalf("the throttled request: %v, %v after %v; want admitted once the other replica released", res.Outcome, err, time.Since(start))
	}
	res.Hold(t.Context())()
}
