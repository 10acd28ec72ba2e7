package goredisadapter_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/burst"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/redisstore/goredisadapter"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // go-redis logs every Sentinel switch and redial
	redistest.Main(m)
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "fgtest:" + hex.EncodeToString(b[:]) + ":"
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// universal returns a go-redis client for opts, closed when t ends.
func universal(t testing.TB, opts *redis.UniversalOptions) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a store on client with a random prefix.
func newStore(t testing.TB, client redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	conn, err := goredisadapter.New(client)
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(ctx(t), redisstore.Options{Conn: conn, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// warm makes a first call through s, so that the client has dialed,
// loaded the Cluster's slots and the commands' key positions, and cached
// the scripts before a case that measures time starts: a go-redis client
// does all that on first use, which on a loaded machine can take longer
// than the suite's tolerance of a few milliseconds.
func warm(t testing.TB, s *redisstore.Store) *redisstore.Store {
	t.Helper()
	hit := []floodgate.Hit{{Rule: mustRule(t, "warm", 1, time.Minute, floodgate.SlidingWindow), Key: "warm", Cost: 1}}
	if _, err := s.Peek(ctx(t), hit); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustRule(t testing.TB, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// deployments starts each kind of Redis and returns a go-redis
// UniversalClient factory for it.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) *redis.UniversalOptions
	}{
		{"standalone", func(t *testing.T) *redis.UniversalOptions {
			return &redis.UniversalOptions{Addrs: []string{redistest.Addr(t)}}
		}},
		{"sentinel", func(t *testing.T) *redis.UniversalOptions {
			s := redistest.StartSentinel(t, 1)
			return &redis.UniversalOptions{Addrs: s.SentinelAddrs(), MasterName: redistest.SentinelMasterName}
		}},
		{"cluster", func(t *testing.T) *redis.UniversalOptions {
			return &redis.UniversalOptions{Addrs: redistest.StartCluster(t, 3, 1).Addrs()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			t.Run("Suite", func(t *testing.T) {
				storetest.Run(t, func(t *testing.T) floodgate.Store {
					return warm(t, newStore(t, universal(t, opts), randomPrefix()))
				})
			})
			t.Run("ReplicasAdmitExactlyTheLimit", func(t *testing.T) {
				testExactLimit(t, replicas(t, opts, 8))
			})
			t.Run("ReplicasMultiKeyNeverExceedAnyLimit", func(t *testing.T) {
				testMultiKey(t, replicas(t, opts, 8))
			})
		})
	}
}

// replicas returns n limiters, each on its own go-redis client and store
// with one prefix, as n replicas of a service.
func replicas(t *testing.T, opts *redis.UniversalOptions, n int) []*floodgate.Limiter {
	prefix := randomPrefix()
	ls := make([]*floodgate.Limiter, n)
	for i := range ls {
		var err error
		if ls[i], err = floodgate.New(newStore(t, universal(t, opts), prefix), floodgate.Options{Timeout: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	return ls
}

// testExactLimit: 1,000 concurrent requests on one key of limit 100 over
// the limiters admit exactly 100, for every algorithm.
func testExactLimit(t *testing.T, ls []*floodgate.Limiter) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow} {
		window := time.Minute
		if alg != floodgate.SlidingWindow {
			window = 24 * time.Hour
		}
		r := mustRule(t, "race", 100, window, alg)
		if alg == floodgate.FixedWindow { // keep clear of midnight UTC
			if d, err := ls[0].Peek(ctx(t), floodgate.Hit{Rule: r, Key: "k", Cost: 1}); err != nil {
				t.Fatal(err)
			} else if d.ResetAfter < 10*time.Second {
				time.Sleep(d.ResetAfter + 10*time.Millisecond)
			}
		}
		var allowed atomic.Int64
		burst.Run(t, 1000, func(i int) error {
			d, err := ls[i%len(ls)].Allow(context.Background(), r, "k")
			if d.Allowed {
				allowed.Add(1)
			}
			return err
		})
		if n := allowed.Load(); n != 100 {
			t.Fatalf("%v: %d of 1000 allowed with limit 100 across %d replicas", alg, n, len(ls))
		}
	}
}

// testMultiKey: login by IP (10) and by account (5), 1,000 concurrent
// checks over 4 IPs and one account: the account admits exactly 5, no IP
// more than 10, and a peek shows each IP holding just what it admitted.
func testMultiKey(t *testing.T, ls []*floodgate.Limiter) {
	ipRule := mustRule(t, "ip", 10, time.Minute, floodgate.SlidingWindow)
	acctRule := mustRule(t, "account", 5, time.Minute, floodgate.SlidingWindow)
	ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1"}
	var mu sync.Mutex
	perIP := map[string]int64{}
	var perAcct int64
	burst.Run(t, 1000, func(i int) error {
		ip := ips[i%len(ips)]
		d, err := ls[i%len(ls)].Check(context.Background(), floodgate.Hit{Rule: ipRule, Key: ip, Cost: 1}, floodgate.Hit{Rule: acctRule, Key: "alice", Cost: 1})
		if d.Allowed {
			mu.Lock()
			perIP[ip]++
			perAcct++
			mu.Unlock()
		}
		return err
	})
	if perAcct != 5 {
		t.Fatalf("account admitted %d, limit 5", perAcct)
	}
	for _, ip := range ips {
		d, err := ls[0].Peek(ctx(t), floodgate.Hit{Rule: ipRule, Key: ip, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if perIP[ip] > 10 || d.Remaining != 10-perIP[ip]-1 {
			t.Fatalf("ip %s admitted %d, peek says %d remaining after one more; a denied check must record nothing", ip, perIP[ip], d.Remaining)
		}
	}
}

func TestNewRefusesWhatItCannotDrive(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "192.0.2.1:6379"}})
	defer ring.Close()
	var nilClient *redis.Client
	for name, c := range map[string]redis.UniversalClient{"ring": ring, "nil client": nilClient, "nil": nil} {
		if _, err := goredisadapter.New(c); !errors.Is(err, goredisadapter.ErrUnsupported) {
			t.Errorf("%s: New = %v, want ErrUnsupported", name, err)
		}
	}
}

// cutter is a TCP proxy in front of Redis that forwards every request but,
// once it sees a script call, drops the connection before the reply: the
// script ran, the client sees a broken connection.
type cutter struct {
	l        net.Listener
	upstream string
	cuts     atomic.Int64
}

func newCutter(t *testing.T, upstream string) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{l: l, upstream: upstream}
	t.Cleanup(func() { l.Close() })
	go c.serve()
	return c
}

func (c *cutter) serve() {
	for {
		down, err := c.l.Accept()
		if err != nil {
			return
		}
		go c.handle(down)
	}
}

func (c *cutter) handle(down net.Conn) {
	defer down.Close()
	up, err := net.Dial("tcp", c.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	var (
		mu      sync.Mutex
		cutting bool // guarded by mu; replies are no longer copied back
	)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			mu.Lock()
			if cutting || err != nil {
				mu.Unlock()
				return
			}
			_, err = down.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := down.Read(buf)
		if n > 0 {
			chunk := bytes.ToLower(buf[:n])
			script := bytes.Contains(chunk, []byte("evalsha")) || bytes.Contains(chunk, []byte("\r\neval\r\n"))
			if script {
				// Stop copying replies first, so that the script's
				// reply can never reach the client; then let the
				// script run and cut the client's connection.
				mu.Lock()
				cutting = true
				mu.Unlock()
				_ = down.(*net.TCPConn).SetLinger(0)
				if _, err := up.Write(buf[:n]); err != nil {
					return
				}
				c.cuts.Add(1)
				down.Close()
				time.Sleep(50 * time.Millisecond)
				return
			}
			if _, err := up.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestScriptsAreNeverReplayed puts a proxy that breaks every connection
// right after a script call between go-redis (MaxRetries 3, its default)
// and Redis. A take must run once and fail; a plain EVALSHA through the
// same client, as a control, is replayed by go-redis.
func TestScriptsAreNeverReplayed(t *testing.T) {
	addr := redistest.Start(t).Addr() // its own: other tests flush scripts
	proxy := newCutter(t, addr)
	client := universal(t, &redis.UniversalOptions{Addrs: []string{proxy.l.Addr().String()}, MaxRetries: 3})
	direct := universal(t, &redis.UniversalOptions{Addrs: []string{addr}})
	prefix := randomPrefix()
	s := newStore(t, client, prefix)
	r := mustRule(t, "replay", 10, time.Minute, floodgate.SlidingWindow)
	// Load the script through a clean connection, so that EVALSHA runs.
	if _, err := newStore(t, direct, prefix).Peek(ctx(t), []floodgate.Hit{{Rule: r, Key: "warm", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}); err == nil {
		t.Fatal("a take whose connection broke before the reply succeeded")
	} else if !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("take: %v; want ErrStoreUnavailable", err)
	}
	d, err := floodgate.New(newStore(t, direct, prefix), floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Peek(ctx(t), floodgate.Hit{Rule: r, Key: "k", Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if used := 10 - p.Remaining - 1; used != 1 || proxy.cuts.Load() != 1 {
		t.Fatalf("the take was recorded %d times over %d cut connections; a script that writes must never be sent again", used, proxy.cuts.Load())
	}

	// The control: go-redis replays a plain EVAL after a broken
	// connection, which is why the adapter marks its scripts NoRetry.
	key := prefix + "control"
	err = client.Eval(ctx(t), "return redis.call('INCR', KEYS[1])", []string{key}).Err()
	if err == nil {
		t.Fatal("control: EVAL through the cutting proxy succeeded")
	}
	n, err := direct.Get(ctx(t), key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("control: go-redis ran a plain EVAL %d times through the proxy; the proxy must provoke a replay, or this test proves nothing", n)
	}
	t.Logf("control: go-redis ran a plain EVAL %d times after broken connections (MaxRetries 3)", n)
}

// TestFrozenRedisRespectsTheBudget freezes Redis (SIGSTOP) under a
// go-redis client without ContextTimeoutEnabled, whose reads wait 3s by
// default: decisions must still return within their budget.
func TestFrozenRedisRespectsTheBudget(t *testing.T) {
	srv := redistest.Start(t)
	client := universal(t, &redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	s := newStore(t, client, randomPrefix())
	l, err := floodgate.New(s, floodgate.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := mustRule(t, "frozen", 10, time.Minute, floodgate.SlidingWindow)
	if _, err := l.Allow(ctx(t), r, "k"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Cont()
	start := time.Now()
	_, err = l.Allow(ctx(t), r, "k")
	if took := time.Since(start); !errors.Is(err, floodgate.ErrStoreUnavailable) || took > 500*time.Millisecond {
		t.Fatalf("decision on a frozen Redis: %v after %v; want ErrStoreUnavailable within the 100ms budget", err, took)
	}
}

// TestStoreLeavesTheClientOpen checks that closing the store does not
// close the service's client.
func TestStoreLeavesTheClientOpen(t *testing.T) {
	client := universal(t, &redis.UniversalOptions{Addrs: []string{redistest.Addr(t)}})
	s := newStore(t, client, randomPrefix())
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := client.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("the client after the store closed: %v", err)
	}
	if err := s.Ping(ctx(t)); !errors.Is(err, floodgate.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}
}

func Example() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: []string{"127.0.0.1:6379"}, // several addresses: a Cluster; with MasterName: Sentinel
		// Recommended: deadlines from the limiter's context, and quick
		// failure while Redis is down.
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
	})
	defer rdb.Close()
	conn, err := goredisadapter.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := redisstore.New(context.Background(), redisstore.Options{Conn: conn})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = limiter
}

// TestFiveLineStart runs the README's first program against a real
// Redis: a go-redis client the service already has, one store, one
// limiter, PerIP.
func TestFiveLineStart(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer rdb.Close()
	store, err := goredisadapter.NewStore(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	// A window of its own, so that the rule's keys are this run's alone
	// on a shared server.
	window := time.Minute + time.Duration(time.Now().UnixNano()%1000)*time.Millisecond
	srv := httptest.NewServer(httplimit.PerIP(limiter, 2, window)(hello))
	defer srv.Close()
	for i, want := range []int{200, 200, 429} {
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, res.StatusCode, want)
		}
	}
	if _, err := goredisadapter.NewStore(redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redistest.Addr(t)}})); !errors.Is(err, goredisadapter.ErrUnsupported) {
		t.Fatalf("NewStore of a Ring: %v, want ErrUnsupported", err)
	}
}

// Through go-redis too, a key whose state Redis holds malformed, or of
// another type, fails with floodgate.ErrCorruptState, whose text names
// neither the key nor the prefix.
func TestCorruptStateThroughGoRedis(t *testing.T) {
	client := universal(t, &redis.UniversalOptions{Addrs: []string{redistest.Addr(t)}})
	prefix := randomPrefix()
	s := newStore(t, client, prefix)
	rule, err := floodgate.NewRule("r", 10, time.Minute, floodgate.TokenBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "{r:user=alice}:t:1m0s" // see the package documentation of redisstore
	for name, write := range map[string]func() error{
		"garbage":    func() error { return client.Set(ctx(t), key, "garbage", 0).Err() },
		"wrong type": func() error { return client.RPush(ctx(t), key, "x").Err() },
	} {
		if err := client.Del(ctx(t), key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := write(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Take(ctx(t), []floodgate.Hit{{Rule: rule, Key: "user=alice", Cost: 1}})
		if !errors.Is(err, floodgate.ErrCorruptState) {
			t.Errorf("%s: %v; want ErrCorruptState", name, err)
		}
		if err != nil && (strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), prefix)) {
			t.Errorf("%s: %q names the key", name, err)
		}
	}
}
