package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// floodgate blocked judges a key with an override (floodgate override)
// by the override's rule, as the services do and as peek and reset do: a
// key blocked under a lower override is listed (in the override's state,
// whether or not its window is the base rule's), a key over the base
// limit but within a raised override is not, and the base rule's state
// of a key whose override moved it to another window, dormant, is not.
func TestBlockedFollowsOverrides(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) { blockedFollowsOverrides(t, url) })
	}
}

func blockedFollowsOverrides(t *testing.T, url string) {
	ctx := context.Background()
	prefix := "blkovr" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	table, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	base := floodgate.Rule{Name: "api", Limit: 5, Window: time.Minute}
	lower := floodgate.Rule{Name: "api", Limit: 2, Window: time.Minute}   // same state as base
	raised := floodgate.Rule{Name: "api", Limit: 50, Window: time.Minute} // same state as base
	hourly := floodgate.Rule{Name: "api", Limit: 2, Window: time.Hour}    // a state of its own
	l := newLimiter(t, url, prefix)
	take := func(r floodgate.Rule, key string, n int) {
		t.Helper()
		for range n {
			if d, err := l.Allow(ctx, r, key); err != nil || !d.Allowed {
				t.Fatalf("take %s under %v: %+v, %v", key, r, d, err)
			}
		}
	}
	take(base, "plain", 5)   // blocked under the base rule: listed
	take(lower, "low", 2)    // blocked under its override of 2: listed
	take(base, "high", 5)    // over the base limit, within its override of 50: not listed
	take(raised, "high", 1)  //
	take(base, "moved", 5)   // the base state, dormant while the hourly override holds: not listed
	take(hourly, "moved", 2) // blocked under the hourly override: listed
	take(base, "expired", 5) // an expired override no longer applies: listed
	hashed := "{tenant} 42"  // kept as a digest by the store
	take(lower, hashed, 2)   // blocked under its override: listed by its digest
	// A rule not asked for, blocked under an override of its own: not
	// listed, though every state key is scanned when two rules are asked.
	other := floodgate.Rule{Name: "other", Limit: 1, Window: time.Minute}
	take(other, "o", 1)
	for _, e := range []overridetable.Entry{
		{Rule: other, Key: "o"},
		{Rule: lower, Key: "low"}, {Rule: raised, Key: "high"}, {Rule: hourly, Key: "moved"},
		{Rule: lower, Key: "unused"}, // an override of a key with no state: nothing to list
		{Rule: lower, Key: hashed},
	} {
		if err := table.Set(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := table.Set(ctx, overridetable.Entry{Rule: raised, Key: "expired", Expires: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	want := map[string]floodgate.Rule{"api plain": base, "api low": lower, "api moved": hourly, "api expired": base,
		"api " + keyenc.Encode(hashed): lower}
	// One rule (one window scanned, widened for the moved key), then two.
	for _, rules := range [][]string{{"-rule", "name=api,limit=5/1m"}, {"-rule", "name=api,limit=5/1m", "-rule", "name=unused,limit=1/1m"}} {
		blockedListsAsOverridden(t, url, prefix, rules, want)
	}
}

// blockedListsAsOverridden runs floodgate blocked for rules and checks
// that it lists exactly want, by "policy key", with their rules.
func blockedListsAsOverridden(t *testing.T, url, prefix string, rules []string, want map[string]floodgate.Rule) {
	t.Helper()
	code, out, errs := cli(t, url, append([]string{"blocked", "-prefix", prefix, "-o", "json"}, rules...)...)
	if code != 0 {
		t.Fatalf("blocked = %d %q %q", code, out, errs)
	}
	got := parseListed(t, out)
	for k, r := range want {
		l, ok := got[k]
		if !ok {
			t.Errorf("%v: %s not listed; want it blocked under %v", rules, k, r)
			continue
		}
		if l.Rule != r.String() || l.Remaining != 0 || l.RetryAfterMS <= 0 || l.RetryAfterMS > r.Window.Milliseconds() {
			t.Errorf("%v: %s listed as %+v; want rule %v, 0 left, a retry-after within its window", rules, k, l, r)
		}
	}
	for k, l := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%v: %s listed (%+v), but it is not blocked under a rule asked for, as its override has it", rules, k, l)
		}
	}
}
