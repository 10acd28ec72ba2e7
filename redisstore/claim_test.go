package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestClaim: a batch is the pending calls in arrival order up to
// maxBatchHits hits, and at least one call whatever its size; calls whose
// callers left are skipped; the calls claimed are marked sent, and the
// rest stay pending in order.
func TestClaim(t *testing.T) {
	const gone = -1 // a call whose caller left
	for _, tc := range []struct {
		name        string
		pending     []int // hits per call
		batch, left []int
	}{
		{"all fit", []int{1, 2, 3}, []int{1, 2, 3}, nil},
		{"exactly the bound", []int{64, 64, 1}, []int{64, 64}, []int{1}},
		{"one past it", []int{64, 65}, []int{64}, []int{65}},
		{"one big call alone", []int{200, 1}, []int{200}, []int{1}},
		{"a big call after a small one", []int{1, 200}, []int{1}, []int{200}},
		{"left callers skipped", []int{gone, 10, gone, 20}, []int{10, 20}, nil},
		{"only left callers", []int{gone, gone}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &batcher{}
			for _, n := range tc.pending {
				cl := &call{hits: n}
				if n == gone {
					cl.hits = 1
					cl.state.Store(callAbandoned)
				}
				b.pending = append(b.pending, cl)
			}
			all := slices.Clone(b.pending)
			batch := b.claim()
			var got, left []int
			for _, cl := range batch {
				got = append(got, cl.hits)
				if s := cl.state.Load(); s != callSent {
					t.Errorf("a claimed call is in state %d, want sent", s)
				}
			}
			for _, cl := range b.pending {
				left = append(left, cl.hits)
				if s := cl.state.Load(); s != callPending {
					t.Errorf("a call left pending is in state %d", s)
				}
			}
			if !slices.Equal(got, tc.batch) || !slices.Equal(left, tc.left) {
				t.Fatalf("claim of %v: batch %v, left %v; want %v and %v", tc.pending, got, left, tc.batch, tc.left)
			}
			for _, cl := range all {
				if cl.state.Load() == callAbandoned && slices.Contains(b.pending, cl) {
					t.Errorf("a call whose caller left is still pending")
				}
			}
			// The claimed calls' slots in the backing array are cleared.
			if tail := b.pending[len(b.pending):cap(b.pending)]; slices.ContainsFunc(tail, func(c *call) bool { return c != nil }) {
				t.Errorf("the pending slice keeps %d claimed calls beyond its length", len(tail))
			}
		})
	}
}

// TestAbandonedCallsAreNeverSent: Takes whose contexts end while they
// wait behind the calls in flight are dropped, and a batch left with no
// caller is not sent at all.
func TestAbandonedCallsAreNeverSent(t *testing.T) {
	s, f, _ := faultStore(t)
	gate := make(chan struct{})
	f.set(func(Script, []string) error { <-gate; return nil }, nil)
	r := mustRule(t, "abandon", 10, time.Minute, floodgate.FixedWindow)
	hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}
	var wg sync.WaitGroup
	for range maxInflight {
		wg.Go(func() {
			if res, err := s.Take(ctx(t), hits); err != nil || !res[0].Allowed {
				t.Errorf("a Take in flight: %+v, %v", res, err)
			}
		})
	}
	waitFor(t, "the calls in flight", func() bool { return f.evals.Load() == maxInflight })
	for range 3 {
		short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := s.Take(short, hits)
		cancel()
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not sent") {
			t.Fatalf("a queued Take whose context ended: %v; want it reported not sent", err)
		}
	}
	close(gate)
	wg.Wait()
	b := s.batch.of(true, []string{s.tag(r.Name, "k")})
	waitFor(t, "the batcher to go idle", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inflight == 0
	})
	if n := f.evals.Load(); n != maxInflight {
		t.Fatalf("%d script calls; want %d, the calls in flight only", n, maxInflight)
	}
	if res, err := s.Peek(ctx(t), hits); err != nil || res[0].Remaining != 10-maxInflight-1 {
		t.Fatalf("peek: %+v, %v; want Remaining %d (after the peeked hit): the abandoned Takes recorded nothing", res, err, 10-maxInflight-1)
	}
}
