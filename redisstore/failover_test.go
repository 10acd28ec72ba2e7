package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

// EnvFailoverReport names a file to which the failover tests append one
// JSON line per run with what they measured; scripts/test.sh prints it.
const envFailoverReport = "FLOODGATE_FAILOVER_REPORT"

// failoverBudget is each decision's time budget in the failover tests: a
// realistic one, so that a dead master costs decisions, not minutes.
const failoverBudget = 250 * time.Millisecond

// failoverResult is what one failover under load measured.
type failoverResult struct {
	Mode      string `json:"mode"`
	Limiters  int    `json:"limiters"`
	Decisions int    `json:"decisions"`
	// Failed is how many decisions returned an error (and so took the
	// route's failure mode); FailedElsewhere counts those among keys that
	// the killed master did not serve.
	Failed          int `json:"failed"`
	FailedElsewhere int `json:"failed_elsewhere"`
	// WindowMS is the unavailability window: from the SIGKILL to the end
	// of the last decision that failed. PromotedMS is when the deployment
	// (CLUSTER NODES, or the sentinels) first named a new master, polled
	// every 50ms; the rest of the window is the clients catching up.
	WindowMS   int64 `json:"window_ms"`
	PromotedMS int64 `json:"promoted_ms"`
	// AckedBeforeKill is how many decisions on the killed master's keys
	// were allowed before the kill; HeldAfter is how many of their
	// entries the promoted replica holds. The difference was lost.
	AckedBeforeKill int64 `json:"acked_before_kill"`
	HeldAfter       int64 `json:"held_after"`
	Lost            int64 `json:"lost"`
}

// failoverTarget is a deployment to fail over under load.
type failoverTarget struct {
	mode string
	url  string
	// victim returns the keys' state keys that the master to kill serves
	// (a subset of keys) and a function that kills it.
	victim func(t *testing.T, stateKeys []string) (served map[string]bool, kill func())
	// survivor returns a client on the master that serves stateKey after
	// the failover.
	survivor func(t *testing.T, stateKey string) rueidis.Client
	// promoted reports whether a new master serves the victim's keys.
	promoted func() bool
}

// testFailover runs 8 limiters, each on its own store, pushing decisions
// on 32 keys (one goroutine each, a pause of 5ms between decisions); kills a master with SIGKILL after a second; and goes on until
// every decision has succeeded again for two seconds, without restarting
// anything. It fails if decisions do not recover within 30 seconds, and
// reports the unavailability window, the failed decisions and the lost
// writes.
func testFailover(t *testing.T, target failoverTarget) failoverResult {
	const limiters, workersEach, keysN = 8, 1, 32
	prefix := randomPrefix()
	rule := mustRule(t, "failover", 1_000_000, time.Hour, floodgate.SlidingWindow)
	ls := make([]*floodgate.Limiter, limiters)
	var store *Store
	for i := range ls {
		s, err := New(ctx(t), Options{URL: target.url, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		store = s
		if ls[i], err = floodgate.New(s, floodgate.Options{Timeout: failoverBudget}); err != nil {
			t.Fatal(err)
		}
	}
	keys := make([]string, keysN)
	stateKeys := make([]string, keysN)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
		stateKeys[i] = stateKey(store, rule, keys[i])
	}
	served, kill := target.victim(t, stateKeys)
	if len(served) == 0 || len(served) == keysN && target.mode == "cluster" {
		t.Fatalf("the victim serves %d of %d keys; want some", len(served), keysN)
	}

	type outcome struct {
		start, end time.Time
		key        int
		ok         bool
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		killAt   time.Time // guarded by mu
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for w := range limiters * workersEach {
		l := ls[w%limiters]
		wg.Go(func() {
			for i := w; ; i += limiters * workersEach {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keysN
				start := time.Now()
				d, err := l.Allow(context.Background(), rule, keys[k])
				end := time.Now()
				if err == nil && !d.Allowed {
					err = errors.New("denied far below the limit")
				}
				if err != nil && !errors.Is(err, floodgate.ErrStoreUnavailable) {
					t.Errorf("decision: %v; a failover must look like an unavailable store", err)
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{start, end, k, err == nil})
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // bounded load
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	time.Sleep(time.Second)
	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	kill()

	// Wait until decisions on the victim's keys succeed again and every
	// decision has succeeded for two seconds.
	deadline := killAt.Add(30 * time.Second)
	var promotedAt time.Time
	for {
		for range 2 {
			time.Sleep(50 * time.Millisecond)
			if promotedAt.IsZero() && target.promoted() {
				promotedAt = time.Now()
			}
		}
		mu.Lock()
		var lastFail time.Time
		okAfter := 0
		for _, o := range outcomes {
			if !o.ok && o.end.After(lastFail) {
				lastFail = o.end
			}
		}
		for _, o := range outcomes {
			if o.ok && served[stateKeys[o.key]] && o.start.After(lastFail) && o.start.After(killAt) {
				okAfter++
			}
		}
		mu.Unlock()
		if !lastFail.IsZero() && time.Since(lastFail) > 2*time.Second && okAfter >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: decisions on the killed master's keys did not recover within %v (last failure %v after the kill, %d successes since)", target.mode, deadline.Sub(killAt), lastFail.Sub(killAt), okAfter)
		}
	}
	close(stop)
	wg.Wait()

	res := failoverResult{Mode: target.mode, Limiters: limiters, Decisions: len(outcomes)}
	var lastFail time.Time
	acked := map[int]int64{}
	for _, o := range outcomes {
		if !o.ok {
			res.Failed++
			if !served[stateKeys[o.key]] {
				res.FailedElsewhere++
			}
			if o.end.After(lastFail) {
				lastFail = o.end
			}
		} else if o.end.Before(killAt) && served[stateKeys[o.key]] {
			acked[o.key]++
		}
	}
	res.WindowMS = lastFail.Sub(killAt).Milliseconds()
	res.PromotedMS = promotedAt.Sub(killAt).Milliseconds()
	for k, n := range acked {
		c := target.survivor(t, stateKeys[k])
		var held int64
		_, _, times := ring(t, c, stateKeys[k])
		for _, at := range times {
			if at <= killAt.UnixMicro() {
				held++
			}
		}
		res.AckedBeforeKill += n
		res.HeldAfter += min(held, n)
	}
	res.Lost = res.AckedBeforeKill - res.HeldAfter
	t.Logf("%s failover under load: %d limiters, %d decisions, %d failed (%d on keys of other masters), unavailability window %dms (new master named after %dms), %d of %d acknowledged writes of the killed master lost",
		res.Mode, res.Limiters, res.Decisions, res.Failed, res.FailedElsewhere, res.WindowMS, res.PromotedMS, res.Lost, res.AckedBeforeKill)
	if path := os.Getenv(envFailoverReport); path != "" {
		line, _ := json.Marshal(res)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.Write(append(line, '\n'))
			f.Close()
		}
	}
	return res
}

// TestClusterFailover kills the master of some of the keys of a 3+3
// Cluster while 8 limiters push decisions; its replica takes over after
// cluster-node-timeout and decisions continue.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 1)
	var victim *redistest.Server
	var victimSlot int
	testFailover(t, failoverTarget{
		mode: "cluster",
		url:  cluster.URL(),
		victim: func(t *testing.T, stateKeys []string) (map[string]bool, func()) {
			victimSlot = int(keySlot(stateKeys[0]))
			var err error
			if victim, err = cluster.MasterOf(victimSlot); err != nil {
				t.Fatal(err)
			}
			served := map[string]bool{}
			for _, k := range stateKeys {
				m, err := cluster.MasterOf(int(keySlot(k)))
				if err != nil {
					t.Fatal(err)
				}
				if m == victim {
					served[k] = true
				}
			}
			return served, victim.Kill
		},
		survivor: func(t *testing.T, stateKey string) rueidis.Client {
			m, err := cluster.MasterOf(int(keySlot(stateKey)))
			if err != nil {
				t.Fatal(err)
			}
			return directClient(t, m.Addr())
		},
		promoted: func() bool {
			m, err := cluster.MasterOf(victimSlot)
			return err == nil && m != victim
		},
	})
}

// TestSentinelFailover kills the master watched by three sentinels while 8
// limiters push decisions through rueidis's Sentinel client; the replica is
// promoted and decisions continue.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	sentinel := redistest.StartSentinel(t, 1)
	first := sentinel.Servers()[0]
	testFailover(t, failoverTarget{
		mode: "sentinel",
		url:  sentinel.URL(),
		victim: func(t *testing.T, stateKeys []string) (map[string]bool, func()) {
			m, err := sentinel.Master()
			if err != nil {
				t.Fatal(err)
			}
			served := map[string]bool{}
			for _, k := range stateKeys {
				served[k] = true
			}
			return served, m.Kill
		},
		survivor: func(t *testing.T, _ string) rueidis.Client {
			m, err := sentinel.Master()
			if err != nil {
				t.Fatal(err)
			}
			return directClient(t, m.Addr())
		},
		promoted: func() bool {
			m, err := sentinel.Master()
			return err == nil && m != first
		},
	})
}

// directClient returns a client on the one server at addr, even a
// Cluster node (no redirections followed).
func directClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(fmt.Errorf("client on %s: %w", addr, err))
	}
	t.Cleanup(c.Close)
	return c
}
