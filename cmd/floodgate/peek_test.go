package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/faultstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// peek asks the store once, a Peek of every hit the command names, and
// reports each hit as the store answered it: a request now would be
// allowed or denied, with what it would leave, the reset and the wait.
func TestPeekCallsTheStoreOnceWithEveryHit(t *testing.T) {
	ctx := t.Context()
	ms := memstore.New(memstore.Options{Now: storetest.NewFakeClock().Now})
	t.Cleanup(func() { ms.Close() })
	fs := faultstore.New(ms)
	l, err := floodgate.New(fs, floodgate.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	login := floodgate.Rule{Name: "login", Limit: 5, Window: 10 * time.Minute}
	pix := floodgate.Rule{Name: "pix", Limit: 2, Window: time.Minute, Algorithm: floodgate.TokenBucket}
	for range 2 {
		for _, r := range []floodgate.Rule{login, pix} {
			if d, err := l.Allow(ctx, r, "alice"); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", r.Name, d, err)
			}
		}
	}
	hits := []targetHit{
		{Hit: floodgate.Hit{Rule: login, Key: "alice", Cost: 1}, policy: "login"},
		{Hit: floodgate.Hit{Rule: pix, Key: "alice", Cost: 1}, policy: "pix_per_account"},
	}
	fs.Record()
	var out bytes.Buffer
	if err := peek(ctx, l, hits, "p:", "json", &out); err != nil {
		t.Fatal(err)
	}
	calls := fs.Recorded()
	if len(calls) != 1 || !calls[0].Peek || len(calls[0].Hits) != 2 || len(calls[0].Results) != 2 ||
		calls[0].Hits[0].Rule != login || calls[0].Hits[1].Rule != pix {
		t.Fatalf("store calls %+v; want one Peek of both hits", calls)
	}
	dec := json.NewDecoder(&out)
	for i, r := range calls[0].Results {
		var got map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if i == 1 && r.Allowed {
			t.Fatalf("pix's peek %+v; want denied: its bucket is empty", r)
		}
		want := map[string]any{"policy": hits[i].policy, "allowed": r.Allowed, "over_limit": !r.Allowed,
			"remaining": float64(max(r.Remaining, 0)), "reset_after_ms": float64(r.ResetAfter.Milliseconds()), "retry_after_ms": float64(r.RetryAfter.Milliseconds())}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("hit %d: %s = %v, want %v (the store's answer %+v)", i, k, got[k], v, r)
			}
		}
	}
}
