package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// On a Cluster, one master's death fails the decisions of the keys it
// serves and no others, with the store's default options: docs/CLUSTER.md
// promises it. A breaker over the whole store broke that promise: under
// concurrent traffic, the failures of one master's keys opened it within
// milliseconds, and every key of every master failed until the breaker
// closed again (a new user measured every decision failing for the rest
// of the run, 24 s where no replica took over).
func TestClusterMasterDownLeavesOtherMastersUp(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 0)
	s, err := New(ctx(t), Options{URL: cluster.URL(), Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{Timeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rule := mustRule(t, "masterdown", 1_000_000, time.Hour, floodgate.SlidingWindow)
	const keysN, workers = 48, 16
	keys := make([]string, keysN)
	onVictim := make([]bool, keysN)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
		if d, err := l.Allow(context.Background(), rule, keys[i]); err != nil || !d.Allowed {
			t.Fatalf("before the kill, %s: %+v, %v", keys[i], d, err)
		}
	}
	victim, err := cluster.MasterOf(int(keySlot(stateKey(s, rule, keys[0]))))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for i, k := range keys {
		m, err := cluster.MasterOf(int(keySlot(stateKey(s, rule, k))))
		if err != nil {
			t.Fatal(err)
		}
		if onVictim[i] = m == victim; onVictim[i] {
			served++
		}
	}
	if served == 0 || served == keysN {
		t.Fatalf("the victim serves %d of %d keys; want some", served, keysN)
	}
	victim.Kill()
	var victimFailed, otherFailed, otherOK atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond) // no replica: the victim's keys stay down
	for w := range workers {
		wg.Go(func() {
			for i := w; time.Now().Before(stop); i += workers {
				k := i % keysN
				_, err := l.Allow(context.Background(), rule, keys[k])
				switch {
				case err != nil && onVictim[k]:
					victimFailed.Add(1)
				case err != nil:
					otherFailed.Add(1)
					if otherFailed.Load() == 1 {
						t.Logf("first failure of a key on a live master: %v", err)
					}
				case !onVictim[k]:
					otherOK.Add(1)
				}
				time.Sleep(time.Millisecond) // bounded load
			}
		})
	}
	wg.Wait()
	t.Logf("after the kill: %d failures on the dead master's keys, %d on the others' (%d successes)", victimFailed.Load(), otherFailed.Load(), otherOK.Load())
	if victimFailed.Load() == 0 {
		t.Fatal("no decision on the dead master's keys failed: the kill did not take")
	}
	if otherFailed.Load() != 0 || otherOK.Load() == 0 {
		t.Fatalf("%d decisions on keys of live masters failed (%d succeeded); want none failed", otherFailed.Load(), otherOK.Load())
	}
}
