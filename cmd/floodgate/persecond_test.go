package main

import (
	"context"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// twoRedis returns stores on two dedicated redis-servers, under a fresh
// prefix each test.
func twoRedis(t *testing.T) (other, second *redisstore.Store, otherSrv, secondSrv *redistest.Server) {
	t.Helper()
	otherSrv, secondSrv = redistest.Start(t), redistest.Start(t)
	open := func(srv *redistest.Server) *redisstore.Store {
		s, err := redisstore.New(context.Background(), redisstore.Options{URL: srv.URL(), Prefix: testPrefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(otherSrv), open(secondSrv), otherSrv, secondSrv
}

// TestPerSecondStoreConformance: the store that splits the limits
// between two Redis passes the Store conformance suite, with the suite's
// rules routed to one Redis or the other by their name (few of them last
// a second), so that its multi-key checks span both.
func TestPerSecondStoreConformance(t *testing.T) {
	srvA, srvB := redistest.Start(t), redistest.Start(t)
	byName := func(r floodgate.Rule) bool {
		h := fnv.New32a()
		h.Write([]byte(r.Name))
		return h.Sum32()%2 == 0
	}
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) floodgate.Store {
		prefix := "ps" + strconv.FormatInt(n.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		open := func(srv *redistest.Server) *redisstore.Store {
			s, err := redisstore.New(context.Background(), redisstore.Options{URL: srv.URL(), Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return &perSecondStore{other: open(srvA), second: open(srvB), rollbackTimeout: time.Second, route: byName}
	})
}

// TestPerSecondStoreMixedCheck: a check whose hits live in both Redis is
// all-or-nothing across them: admitted, both record; denied by either,
// neither does (the other one's take rolled back, or the per-second one
// never taken); the per-second Redis failing fails the check and leaves
// the other one as it was.
func TestPerSecondStoreMixedCheck(t *testing.T) {
	other, second, _, secondSrv := twoRedis(t)
	s := &perSecondStore{other: other, second: second, rollbackTimeout: time.Second,
		route: func(r floodgate.Rule) bool { return r.Name == "sec" }} // minutes, so that no window ends mid-test
	ctx := context.Background()
	minute := floodgate.Rule{Name: "min", Limit: 3, Window: time.Minute, Algorithm: floodgate.SlidingWindow}
	sec := floodgate.Rule{Name: "sec", Limit: 2, Window: time.Minute, Algorithm: floodgate.SlidingWindow}
	remaining := func(st floodgate.Store, r floodgate.Rule, key string) int64 {
		t.Helper()
		res, err := st.Peek(ctx, []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		// A peek says what one more hit would leave: Limit-1 on a fresh key.
		return res[0].Remaining
	}
	check := func(hits ...floodgate.Hit) []floodgate.Result {
		t.Helper()
		res, err := s.Take(ctx, hits)
		if err != nil || len(res) != len(hits) {
			t.Fatalf("Take: %v, %v", res, err)
		}
		return res
	}

	res := check(floodgate.Hit{Rule: minute, Key: "a", Cost: 1}, floodgate.Hit{Rule: sec, Key: "a", Cost: 1})
	if !res[0].Allowed || !res[1].Allowed || remaining(other, minute, "a") != 1 || remaining(second, sec, "a") != 0 {
		t.Fatalf("the first check: %+v; other's min:a leaves %d, second's sec:a %d; want both allowed and recorded",
			res, remaining(other, minute, "a"), remaining(second, sec, "a"))
	}
	if p, _ := other.Peek(ctx, []floodgate.Hit{{Rule: sec, Key: "a", Cost: 1}}); !p[0].Allowed || p[0].Remaining != 1 {
		t.Errorf("sec:a is in the other Redis too: peek %+v", p[0])
	}

	// The per-second key is full: the check is denied, and min:a keeps
	// the one hit it had.
	check(floodgate.Hit{Rule: sec, Key: "a", Cost: 1})
	res = check(floodgate.Hit{Rule: minute, Key: "a", Cost: 1}, floodgate.Hit{Rule: sec, Key: "a", Cost: 1})
	if res[1].Allowed || remaining(other, minute, "a") != 1 {
		t.Errorf("a check denied by the per-second key: %+v; min:a leaves %d after one more, want 1 (the other Redis's take rolled back)", res, remaining(other, minute, "a"))
	}

	// min:b full in the other Redis: the per-second key of the check is
	// not taken.
	for range 3 {
		check(floodgate.Hit{Rule: minute, Key: "b", Cost: 1})
	}
	res = check(floodgate.Hit{Rule: minute, Key: "b", Cost: 1}, floodgate.Hit{Rule: sec, Key: "b", Cost: 1})
	if res[0].Allowed || remaining(second, sec, "b") != 1 {
		t.Errorf("a check denied by the other Redis: %+v; sec:b leaves %d after one more, want 1 (never taken)", res, remaining(second, sec, "b"))
	}

	// The per-second Redis gone: the check fails, and min:c is left as
	// it was.
	secondSrv.Kill()
	if res, err := s.Take(ctx, []floodgate.Hit{{Rule: minute, Key: "c", Cost: 1}, {Rule: sec, Key: "c", Cost: 1}}); err == nil {
		t.Errorf("Take with the per-second Redis down: %+v, no error", res)
	}
	if got := remaining(other, minute, "c"); got != 2 {
		t.Errorf("min:c leaves %d after one more, want 2: the failed check rolled back", got)
	}
}

// TestServePerSecondRedis: with REDIS_PERSECOND=true, envoyproxy/ratelimit's
// HOST:PORT settings of the second Redis (REDIS_PERSECOND_URL, _AUTH)
// send the limits whose unit is second there, per descriptor, and every
// other limit to REDIS_URL's Redis; the pool settings are accepted and
// logged once with why.
func TestServePerSecondRedis(t *testing.T) {
	main, perSec := redistest.Start(t), passwordRedis(t, "ps-secret")
	conf := t.TempDir()
	yaml := "domain: rl\ndescriptors:\n" +
		"  - key: burst\n    rate_limit: {unit: second, requests_per_unit: 100}\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	if err := os.WriteFile(filepath.Join(conf, "rl.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"CONFIG_DIR": conf, "REDIS_URL": main.Addr(), "CACHE_KEY_PREFIX": "ps:",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": perSec.Addr(), "REDIS_PERSECOND_AUTH": "ps-secret",
		"REDIS_POOL_SIZE": "10", "REDIS_PERSECOND_POOL_SIZE": "20", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "WAIT"}
	r := startServe(t, vars)
	resp, err := r.client(t).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "burst", Value: "x"}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "x"}}},
	}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%v, %v; want OK:\n%s", resp, err, r.logs.String())
	}
	// A per-second key may expire (within a second) before it is looked
	// at: each Redis is asked for its keys, and for how many expired and
	// how many DELs it ran.
	type view struct {
		keys         []string
		expired, del int
	}
	look := func(url string) view {
		t.Helper()
		opt, err := redisopt.FromURL(url, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var v view
		if v.keys, err = c.Do(context.Background(), c.B().Keys().Pattern("ps:*").Build()).AsStrSlice(); err != nil {
			t.Fatal(err)
		}
		info, err := c.Do(context.Background(), c.B().Info().Section("all").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if n, ok := strings.CutPrefix(line, "expired_keys:"); ok {
				v.expired, _ = strconv.Atoi(n)
			}
			if rest, ok := strings.CutPrefix(line, "cmdstat_del:calls="); ok {
				n, _, _ := strings.Cut(rest, ",")
				v.del, _ = strconv.Atoi(n)
			}
		}
		return v
	}
	mainURL, psURL := main.URL(), "redis://:ps-secret@"+perSec.Addr()
	if v := look(mainURL); len(v.keys) != 1 || !strings.HasSuffix(v.keys[0], "rl/user=x}:f:1m0s") || v.expired != 0 {
		t.Errorf("REDIS_URL's Redis holds %q, %d expired; want the per-minute limit's key alone, none expired", v.keys, v.expired)
	}
	if v := look(psURL); len(v.keys)+v.expired != 1 || len(v.keys) == 1 && !strings.HasSuffix(v.keys[0], "rl/burst=x}:f:1s") {
		t.Errorf("REDIS_PERSECOND_URL's Redis holds %q, %d expired; want the per-second limit's key alone", v.keys, v.expired)
	}
	// The subcommands, in the service's environment, go where the
	// service keeps each limit.
	if code, out, errs := cliEnv(t, vars, "reset", "-timeout", "2s", "-config", conf, "-domain", "rl", "burst=x"); code != 0 {
		t.Fatalf("reset: exit %d %q %q", code, out, errs)
	}
	if m, ps := look(mainURL), look(psURL); m.del != 0 || ps.del != 1 || len(ps.keys) != 0 {
		t.Errorf("after floodgate reset burst=x: %d DEL on REDIS_URL's Redis, %d on REDIS_PERSECOND_URL's, which holds %q; want 0, 1 and nothing",
			m.del, ps.del, ps.keys)
	}
	logs := r.logs.String()
	for _, w := range []string{"setting=REDIS_POOL_SIZE value=10", "setting=REDIS_PERSECOND_POOL_SIZE value=20", "setting=REDIS_POOL_ON_EMPTY_BEHAVIOR value=WAIT",
		"the limits of one second are kept in REDIS_PERSECOND_URL"} {
		if strings.Count(logs, w) != 1 {
			t.Errorf("the logs say %q %d times, want once:\n%s", w, strings.Count(logs, w), logs)
		}
	}
}
