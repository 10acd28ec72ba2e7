package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// replica returns a Limiter on a store of its own (its own client) with
// the given prefix: one replica of a fleet that shares the Redis at addr.
func replica(t testing.TB, addr, prefix string) *floodgate.Limiter {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := New(c, Options{URL: "redis://" + addr, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// slotsFree returns how many leases of rule key could take now.
func slotsFree(t testing.TB, l *floodgate.Limiter, rule floodgate.Rule, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), floodgate.Hit{Rule: rule, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// TestLeasesAcrossReplicas: three replicas, 64 holders each, one key of N
// slots on a real Redis. The holders count themselves (up after acquiring,
// down before releasing): the most at once never exceeds N. Every lease
// is renewed while held and released once; releasing every lease a
// second time frees nothing.
func TestLeasesAcrossReplicas(t *testing.T) {
	const n, replicas, holders = 8, 3, 64
	addr, prefix := redistest.Addr(t), randomPrefix()
	rule := mustRule(t, "inflight", n, 5*time.Second, floodgate.Concurrency)
	const key = "tenant-42"
	var held, most, admitted, denied atomic.Int64
	var mu sync.Mutex
	var all []floodgate.Decision // every lease, as last renewed
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, replicas*holders)
	for range replicas {
		l := replica(t, addr, prefix)
		for range holders {
			wg.Go(func() {
				c := context.Background()
				for time.Now().Before(stop) {
					d, err := l.Allow(c, rule, key)
					if err != nil {
						errs <- err
						return
					}
					if !d.Allowed {
						denied.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					admitted.Add(1)
					now := held.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					if d, err = l.Renew(c, d); err != nil || !d.Allowed {
						errs <- fmt.Errorf("a renewal within the time to live failed: %+v, %v", d, err)
						return
					}
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					held.Add(-1)
					if err := l.Refund(c, d); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					all = append(all, d)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d leases taken, %d denied, at most %d held at once", admitted.Load(), denied.Load(), most.Load())
	if most.Load() > n {
		t.Fatalf("%d leases held at once by the holders' own count; the limit is %d", most.Load(), n)
	}
	if most.Load() < n || admitted.Load() < 10*n || denied.Load() == 0 {
		t.Fatalf("at most %d held at once, %d taken, %d denied: the test did not contend for the slots", most.Load(), admitted.Load(), denied.Load())
	}
	l := replica(t, addr, prefix)
	if free := slotsFree(t, l, rule, key); free != n {
		t.Fatalf("after every release: %d slots free; want %d", free, n)
	}
	// Taking every slot again, then releasing every earlier lease a
	// second time, must leave the new holders their slots.
	for i := range n {
		if d, err := l.Allow(context.Background(), rule, key); err != nil || !d.Allowed {
			t.Fatalf("lease %d of %d after the run: %+v, %v", i+1, n, d, err)
		}
	}
	for _, d := range all {
		if err := l.Refund(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if free := slotsFree(t, l, rule, key); free != 0 {
		t.Fatalf("after releasing %d leases a second time: %d slots free; want 0: a lease is released once", len(all), free)
	}
}

// envHolder makes the test binary a holder process
// (TestLeaseHolderProcess): "addr prefix key limit ttl-in-ms".
const envHolder = "FLOODGATE_TEST_LEASE_HOLDER"

// TestLeaseHolderProcess is the process that TestKilledHolderLeasesReturn
// kills: it takes every slot of its key, says "held", and renews the
// leases every third of their time to live until it dies.
func TestLeaseHolderProcess(t *testing.T) {
	spec := os.Getenv(envHolder)
	if spec == "" {
		t.Skip("run by TestKilledHolderLeasesReturn")
	}
	var addr, prefix, key string
	var limit, ms int64
	if _, err := fmt.Sscan(spec, &addr, &prefix, &key, &limit, &ms); err != nil {
		t.Fatal(err)
	}
	ttl := time.Duration(ms) * time.Millisecond
	l := replica(t, addr, prefix)
	rule := mustRule(t, "inflight", limit, ttl, floodgate.Concurrency)
	leases := make([]floodgate.Decision, limit)
	for i := range leases {
		d, err := l.Allow(context.Background(), rule, key)
		if err != nil || !d.Allowed {
			t.Fatalf("lease %d: %+v, %v", i, d, err)
		}
		leases[i] = d
	}
	fmt.Println("held")
	for {
		time.Sleep(ttl / 3)
		for i, d := range leases {
			d, err := l.Renew(context.Background(), d)
			if err != nil || !d.Allowed {
				t.Fatalf("renewal of lease %d: %+v, %v", i, d, err)
			}
			leases[i] = d
		}
	}
}

// TestKilledHolderLeasesReturn: a process holds every slot and renews its
// leases for longer than their time to live; once it is killed (SIGKILL:
// no release), its slots return within the leases' time to live.
func TestKilledHolderLeasesReturn(t *testing.T) {
	const limit, ttl = 4, time.Second
	addr, prefix, key := redistest.Addr(t), randomPrefix(), "tenant-7"
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHolder+"="+addr+" "+prefix+" "+key+" "+strconv.Itoa(limit)+" "+strconv.FormatInt(ttl.Milliseconds(), 10),
		redistest.EnvAddr+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "held" {
		said := lines.Text()
		for lines.Scan() {
			said += "\n" + lines.Text()
		}
		t.Fatalf("the holder process said %q, %v", said, lines.Err())
	}
	go func() { // drain, so that the child never blocks on its output
		for lines.Scan() {
		}
	}()
	l := replica(t, addr, prefix)
	rule := mustRule(t, "inflight", limit, ttl, floodgate.Concurrency)
	time.Sleep(ttl + ttl/2) // the leases' first time to live has run out: renewals hold them
	if free := slotsFree(t, l, rule, key); free != 0 {
		t.Fatalf("while the holder lives and renews, past the first time to live: %d slots free; want 0", free)
	}
	if err := cmd.Process.Signal(syscallKill); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	if free := slotsFree(t, l, rule, key); free == limit {
		t.Fatalf("at once after the kill: all %d slots free; the leases must hold until their time to live runs out", free)
	}
	for slotsFree(t, l, rule, key) < limit {
		if time.Since(killed) > ttl+200*time.Millisecond {
			t.Fatalf("%v after the kill, %d of %d slots free; a dead holder's leases must free within their time to live (%v)",
				time.Since(killed), slotsFree(t, l, rule, key), limit, ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("all %d slots free %v after the kill (time to live %v, renewed every %v)", limit, time.Since(killed).Round(time.Millisecond), ttl, ttl/3)
}

// A renewal writes the ring with the TTL a take gives: until its newest
// entry, the renewed lease's, leaves the window.
func TestRenewSetsTheTTL(t *testing.T) {
	s := newStore(t)
	l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rule := mustRule(t, "ttl", 2, 2*time.Second, floodgate.Concurrency)
	d, err := l.Allow(ctx(t), rule, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	time.Sleep(time.Second)
	if d, err = l.Renew(ctx(t), d); err != nil || !d.Allowed {
		t.Fatalf("Renew: %+v, %v", d, err)
	}
	key, err := rediskeys.StateKey(s.prefix, rule, "k")
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := rawClient(t).Do(ctx(t), rawClient(t).B().Pttl().Key(key).Build()).AsInt64()
	if err != nil || ttl <= 1900 || ttl > 2000 {
		t.Fatalf("PTTL %s = %d ms, %v; want about 2,000 after the renewal (a take's 1,000 would be left)", key, ttl, err)
	}
}
