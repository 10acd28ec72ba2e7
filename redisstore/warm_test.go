package redisstore

import (
	"context"
	"errors"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestWarm: after Warm, a fresh store on a fresh Redis decides without a
// first-use cost. Its scripts are loaded (SCRIPT EXISTS), it wrote no key,
// and 400 Takes after it, 200 of them concurrent, neither meet NOSCRIPT
// (no EVALSHA fails, no EVAL is sent: the take script's 40 KB) nor dial a
// connection (the client's connections are those Warm left). Without
// Warm, the first Takes do both: rueidis dials its second connection at
// the first call that picks it, and each call that meets NOSCRIPT sends
// the script.
func TestWarm(t *testing.T) {
	srv := redistest.Start(t) // fresh: no script loaded
	s, err := New(context.Background(), Options{URL: srv.URL(), Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	before := serverCounts(t, srv.Addr())
	if err := s.Warm(ctx(t)); err != nil {
		t.Fatal(err)
	}
	warmed := serverCounts(t, srv.Addr())
	if exists, err := redistest.Command(srv.Addr(), "SCRIPT", "EXISTS", takeScript.SHA1, refundScript.SHA1); err != nil || exists != "1\n1" {
		t.Errorf("SCRIPT EXISTS take refund after Warm: %q, %v; want 1 and 1", exists, err)
	}
	if n, err := redistest.Command(srv.Addr(), "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after Warm: %q, %v; want 0 (Warm only peeks)", n, err)
	}
	// One EVAL for each script: the concurrent peeks came after the
	// take script was loaded.
	if got := warmed.eval - before.eval; got != 2 {
		t.Errorf("Warm sent %d EVALs, want 2 (each script once)", got)
	}

	rule := floodgate.Rule{Name: "warm", Limit: 1000, Window: time.Minute}
	take := func() {
		if _, err := s.Take(ctx(t), []floodgate.Hit{{Rule: rule, Key: "k", Cost: 1}}); err != nil {
			t.Error(err)
		}
	}
	for range 200 {
		take()
	}
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(take)
	}
	wg.Wait()
	after := serverCounts(t, srv.Addr())
	if after.noscript != warmed.noscript || after.eval != warmed.eval {
		t.Errorf("after Warm, 400 Takes met NOSCRIPT %d times and sent %d EVALs; want none", after.noscript-warmed.noscript, after.eval-warmed.eval)
	}
	if !slices.Equal(after.conns, warmed.conns) {
		t.Errorf("after Warm, 400 Takes dialled: the store's connections were %v, then %v", warmed.conns, after.conns)
	}
	if runtime.GOMAXPROCS(0) >= 2 && len(warmed.conns) < 2 { // rueidis pipelines over 2^⌊log₂ GOMAXPROCS⌋ connections, 4 at most
		t.Errorf("Warm left %d connections (%v), want the client's 2 or more", len(warmed.conns), warmed.conns)
	}
}

// TestWarmDuringOutage: Warm with Redis down fails fast, with an error
// wrapping floodgate.ErrStoreUnavailable, and succeeds once Redis is back.
func TestWarmDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	dctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	s, err := New(dctx, Options{URL: srv.URL(), Prefix: randomPrefix(), redialInterval: 50 * time.Millisecond})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Warm(wctx); !errors.Is(err, floodgate.ErrStoreUnavailable) || wctx.Err() != nil {
		t.Fatalf("Warm with Redis down: %v (context: %v); want an error wrapping ErrStoreUnavailable before the context ends", err, wctx.Err())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.Warm(ctx(t))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Warm 5s after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if exists, err := redistest.Command(srv.Addr(), "SCRIPT", "EXISTS", takeScript.SHA1, refundScript.SHA1); err != nil || exists != "1\n1" {
		t.Errorf("SCRIPT EXISTS take refund after Warm: %q, %v; want 1 and 1", exists, err)
	}
}

// counts are what Redis reports of its script calls and clients.
type counts struct {
	noscript int   // EVALSHA calls that failed: NOSCRIPT, here
	eval     int   // EVAL calls
	conns    []int // the ids of the RESP3 clients (rueidis's; redistest speaks RESP2), sorted
}

var (
	evalshaFailed = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,.*failed_calls=(\d+)`)
	evalCalls     = regexp.MustCompile(`cmdstat_eval:calls=(\d+)`)
	clientID      = regexp.MustCompile(`id=(\d+) .* resp=3`)
)

func serverCounts(t *testing.T, addr string) counts {
	t.Helper()
	stats, err := redistest.Command(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	num := func(re *regexp.Regexp) int {
		m := re.FindStringSubmatch(stats)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	c.noscript, c.eval = num(evalshaFailed), num(evalCalls)
	list, err := redistest.Command(addr, "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		if m := clientID.FindStringSubmatch(line); m != nil {
			id, _ := strconv.Atoi(m[1])
			c.conns = append(c.conns, id)
		}
	}
	slices.Sort(c.conns)
	return c
}

// TestWarmCluster: on a Redis Cluster, Warm loads the take script on
// every master (its peeks name keys of many slots) and writes no key.
func TestWarmCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	s := newStoreURL(t, cluster.URL())
	if err := s.Warm(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for i, addr := range cluster.Addrs() {
		if exists, err := redistest.Command(addr, "SCRIPT", "EXISTS", takeScript.SHA1); err != nil || exists != "1" {
			t.Errorf("master %d: SCRIPT EXISTS take: %q, %v; want 1", i+1, exists, err)
		}
		if n, err := redistest.Command(addr, "DBSIZE"); err != nil || n != "0" {
			t.Errorf("master %d: DBSIZE after Warm: %q, %v; want 0", i+1, n, err)
		}
	}
}
