package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/redisstore/goredisadapter"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"
)

// peer is one row of the table: a limiter built fresh for every cell.
type peer struct {
	name  string
	redis bool
	// ref marks floodgate's reference row of its group (Redis or memory),
	// the denominator of every ratio.
	ref bool
	// base marks the row of floodgate at an earlier commit (base.go),
	// which runs whenever the reference rows do.
	base bool
	// algorithm names what the peer counts with.
	algorithm string
	build     func(addr, prefix string) (limiter, error)
}

// denialCacheSize is the denial cache of the floodgate rows that use one.
const denialCacheSize = 10_000

var peers = []peer{
	{name: "floodgate", redis: true, ref: true, algorithm: "sliding log, exact", build: floodgateRedis(floodgate.SlidingWindow, denialCacheSize)},
	{name: "floodgate via go-redis", redis: true, algorithm: "sliding log, exact", build: floodgateGoRedis(floodgate.SlidingWindow, denialCacheSize)},
	{name: "floodgate, no denial cache", redis: true, algorithm: "sliding log, exact", build: floodgateRedis(floodgate.SlidingWindow, 0)},
	{name: "floodgate, 10k overrides", redis: true, algorithm: "sliding log, exact", build: withOverrides(floodgateRedis(floodgate.SlidingWindow, denialCacheSize))},
	{name: "floodgate token bucket", redis: true, algorithm: "GCRA", build: floodgateRedis(floodgate.TokenBucket, denialCacheSize)},
	{name: "floodgate counter", redis: true, algorithm: "sliding counter", build: floodgateRedis(floodgate.SlidingWindowCounter, denialCacheSize)},
	{name: "one EVALSHA per request", redis: true, algorithm: "sliding log, exact", build: evalshaLoop},
	{name: "go-redis/redis_rate v10", redis: true, algorithm: "GCRA", build: redisRate},
	{name: "ulule/limiter v3 redis", redis: true, algorithm: "fixed window", build: ululeRedis},
	{name: "floodgate memstore", ref: true, algorithm: "GCRA", build: floodgateMem(floodgate.TokenBucket)},
	{name: "floodgate memstore, 10k overrides", algorithm: "GCRA", build: withOverrides(floodgateMem(floodgate.TokenBucket))},
	{name: "floodgate memstore sliding", algorithm: "sliding log, exact", build: floodgateMem(floodgate.SlidingWindow)},
	{name: "floodgate memstore counter", algorithm: "sliding counter", build: floodgateMem(floodgate.SlidingWindowCounter)},
	{name: "sethvargo/go-limiter", algorithm: "token bucket", build: sethvargo},
	{name: "x/time/rate map", algorithm: "token bucket", build: xrate},
	{name: "ulule/limiter v3 memory", algorithm: "fixed window", build: ululeMemory},
}

// rules returns floodgate's normal and hot rules for alg.
func rules(alg floodgate.Algorithm) (floodgate.Rule, floodgate.Rule) {
	normal, err := floodgate.NewRule("normal", normalLimit, window, alg)
	if err != nil {
		panic(err)
	}
	hot, err := floodgate.NewRule("hot", hotLimit, window, alg)
	if err != nil {
		panic(err)
	}
	return normal, hot
}

type fgLimiter struct {
	l           *floodgate.Limiter
	normal, hot floodgate.Rule
	// pNormal and pHot are normal and hot prepared for l
	// (Limiter.Prepare), as README tells users to decide.
	pNormal, pHot *floodgate.Prepared
	close         func()
	// What l was built with, for withOverrides to build it again.
	store   floodgate.Store
	timeout time.Duration
	cache   int
}

func (f *fgLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	p := f.pNormal
	if hot {
		p = f.pHot
	}
	d, err := p.Allow(ctx, key)
	return d.Allowed, err
}

// newFgLimiter returns the row of l with the rules of alg prepared.
func newFgLimiter(l *floodgate.Limiter, alg floodgate.Algorithm, close func()) (*fgLimiter, error) {
	f := &fgLimiter{l: l, close: close}
	f.normal, f.hot = rules(alg)
	return f, f.prepare()
}

// prepare prepares f's rules for f.l.
func (f *fgLimiter) prepare() (err error) {
	if f.pNormal, err = f.l.Prepare(f.normal); err != nil {
		return err
	}
	f.pHot, err = f.l.Prepare(f.hot)
	return err
}

func (f *fgLimiter) Close() { f.close() }

// overridden is the number of per-key overrides of the rows that have
// them: keys of the normal rule that the workloads never send, so that
// every decision looks its key up in a full set and misses, which is the
// cost that overrides add to the decisions of everyone else.
const overridden = 10_000

// withOverrides is build with overridden overrides (package overrides, a
// fixed Set, which is what a Table swaps in) on the limiter's rule.
func withOverrides(build func(addr, prefix string) (limiter, error)) func(addr, prefix string) (limiter, error) {
	return func(addr, prefix string) (limiter, error) {
		l, err := build(addr, prefix)
		if err != nil {
			return nil, err
		}
		f := l.(*fgLimiter)
		entries := make([]overrides.Entry, overridden)
		for i := range entries {
			r := f.normal
			r.Limit = normalLimit / 2
			entries[i] = overrides.Entry{Rule: r, Key: prefix + "vip-" + strconv.Itoa(i)}
		}
		set, err := overrides.NewSet(entries...)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("overrides: %w", err)
		}
		for _, e := range entries {
			if r, ok := set.Override(e.Rule, e.Key); !ok || r != e.Rule {
				l.Close()
				return nil, fmt.Errorf("overrides: the set lacks the override of key %q", e.Key)
			}
		}
		f.l, err = floodgate.New(f.store, floodgate.Options{Timeout: f.timeout, DenialCacheSize: f.cache, Overrides: set})
		if err == nil {
			err = f.prepare()
		}
		if err != nil {
			l.Close()
			return nil, err
		}
		return f, nil
	}
}

func floodgateRedis(alg floodgate.Algorithm, cache int) func(addr, prefix string) (limiter, error) {
	return func(addr, prefix string) (limiter, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := redisstore.New(ctx, redisstore.Options{URL: "redis://" + addr, Prefix: prefix})
		if err != nil {
			return nil, err
		}
		return fgOnRedis(s, alg, cache, func() { s.Close() })
	}
}

// fgOnRedis is floodgate's limiter on a Redis store s, with alg and a
// denial cache of cache entries; close releases what the row built.
func fgOnRedis(s *redisstore.Store, alg floodgate.Algorithm, cache int, close func()) (limiter, error) {
	// A budget that a busy 2-core machine never exceeds: the benchmark
	// measures throughput, not the failure path.
	const timeout = 2 * time.Second
	l, err := floodgate.New(s, floodgate.Options{Timeout: timeout, DenialCacheSize: cache})
	if err != nil {
		close()
		return nil, err
	}
	f, err := newFgLimiter(l, alg, close)
	if err != nil {
		close()
		return nil, err
	}
	f.store, f.timeout, f.cache = s, timeout, cache
	return f, nil
}

// floodgateGoRedis is floodgateRedis on a go-redis client, through
// goredisadapter: the same store, on the other driver.
func floodgateGoRedis(alg floodgate.Algorithm, cache int) func(addr, prefix string) (limiter, error) {
	return func(addr, prefix string) (limiter, error) {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		conn, err := goredisadapter.New(c)
		if err != nil {
			c.Close()
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := redisstore.New(ctx, redisstore.Options{Conn: conn, Prefix: prefix})
		if err != nil {
			c.Close()
			return nil, err
		}
		return fgOnRedis(s, alg, cache, func() { s.Close(); c.Close() })
	}
}

func floodgateMem(alg floodgate.Algorithm) func(addr, prefix string) (limiter, error) {
	return func(string, string) (limiter, error) {
		s := memstore.New(memstore.Options{})
		l, err := floodgate.New(s, floodgate.Options{})
		if err != nil {
			return nil, err
		}
		f, err := newFgLimiter(l, alg, func() { s.Close() })
		if err != nil {
			s.Close()
			return nil, err
		}
		f.store = s
		return f, nil
	}
}

// slidingLua is the least a one-script-per-request sliding-window log can
// do: trim, count, add a unique member, set the TTL.
const slidingLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return 0
`

type evalsha struct {
	c                  rueidis.Client
	script             *rueidis.Lua
	normal, hot        []string // limit, window (µs)
	ttl, memberPrefix  string
	seq                atomic.Uint64
	prefixNormal, pHot string
}

func evalshaLoop(addr, prefix string) (limiter, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	w := strconv.FormatInt(window.Microseconds(), 10)
	return &evalsha{
		c: c, script: rueidis.NewLuaScript(slidingLua),
		normal: []string{strconv.Itoa(normalLimit), w}, hot: []string{strconv.Itoa(hotLimit), w},
		ttl: strconv.FormatInt(window.Milliseconds(), 10), memberPrefix: prefix,
	}, nil
}

func (e *evalsha) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	r := e.normal
	if hot {
		r = e.hot
	}
	member := e.memberPrefix + strconv.FormatUint(e.seq.Add(1), 36)
	n, err := e.script.Exec(ctx, e.c, []string{key}, []string{r[0], r[1], member, e.ttl}).AsInt64()
	return n == 1, err
}

func (e *evalsha) Close() { e.c.Close() }

type redisRateLimiter struct {
	c           *goredis.Client
	l           *redis_rate.Limiter
	normal, hot redis_rate.Limit
}

func redisRate(addr, _ string) (limiter, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	return &redisRateLimiter{
		c: c, l: redis_rate.NewLimiter(c),
		normal: redis_rate.Limit{Rate: normalLimit, Burst: normalLimit, Period: window},
		hot:    redis_rate.Limit{Rate: hotLimit, Burst: hotLimit, Period: window},
	}, nil
}

func (r *redisRateLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	lim := r.normal
	if hot {
		lim = r.hot
	}
	res, err := r.l.Allow(ctx, key, lim)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func (r *redisRateLimiter) Close() { r.c.Close() }

type ululeLimiter struct {
	normal, hot *ulule.Limiter
	close       func()
}

func (u *ululeLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	l := u.normal
	if hot {
		l = u.hot
	}
	c, err := l.Get(ctx, key)
	return !c.Reached, err
}

func (u *ululeLimiter) Close() { u.close() }

func ululeRedis(addr, prefix string) (limiter, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	s, err := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	return &ululeLimiter{
		normal: ulule.New(s, ulule.Rate{Period: window, Limit: normalLimit}),
		hot:    ulule.New(s, ulule.Rate{Period: window, Limit: hotLimit}),
		close:  func() { c.Close() },
	}, nil
}

func ululeMemory(string, string) (limiter, error) {
	s := ulmemory.NewStore()
	return &ululeLimiter{
		normal: ulule.New(s, ulule.Rate{Period: window, Limit: normalLimit}),
		hot:    ulule.New(s, ulule.Rate{Period: window, Limit: hotLimit}),
		close:  func() {},
	}, nil
}

type sethvargoLimiter struct {
	normal, hot interface {
		Take(context.Context, string) (uint64, uint64, uint64, bool, error)
		Close(context.Context) error
	}
}

func sethvargo(string, string) (limiter, error) {
	normal, err := memorystore.New(&memorystore.Config{Tokens: normalLimit, Interval: window})
	if err != nil {
		return nil, err
	}
	hot, err := memorystore.New(&memorystore.Config{Tokens: hotLimit, Interval: window})
	if err != nil {
		return nil, err
	}
	return &sethvargoLimiter{normal: normal, hot: hot}, nil
}

func (s *sethvargoLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	l := s.normal
	if hot {
		l = s.hot
	}
	_, _, _, ok, err := l.Take(ctx, key)
	return ok, err
}

func (s *sethvargoLimiter) Close() {
	_ = s.normal.Close(context.Background())
	_ = s.hot.Close(context.Background())
}

// xrateLimiter is the usual way to use golang.org/x/time/rate per key: a
// map of limiters, created on first use.
type xrateLimiter struct {
	m sync.Map // key -> *rate.Limiter
}

func xrate(string, string) (limiter, error) { return &xrateLimiter{}, nil }

func (x *xrateLimiter) Allow(_ context.Context, key string, hot bool) (bool, error) {
	v, ok := x.m.Load(key)
	if !ok {
		lim := rate.NewLimiter(rate.Limit(float64(normalLimit)/window.Seconds()), normalLimit)
		if hot {
			lim = rate.NewLimiter(rate.Limit(float64(hotLimit)/window.Seconds()), hotLimit)
		}
		v, _ = x.m.LoadOrStore(key, lim)
	}
	return v.(*rate.Limiter).Allow(), nil
}

func (x *xrateLimiter) Close() {}

// redisVersion returns the redis_version of the server at addr.
func redisVersion(addr string) (string, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}

// redisTimes is what the redis-server spent so far: its CPU time (INFO
// cpu, used_cpu_sys plus used_cpu_user) and the time its commands took
// (INFO commandstats), split into script calls (EVAL, EVALSHA, FCALL and
// their read-only forms, which include the commands the scripts call) and
// every other command but INFO, which the benchmark itself sends.
type redisTimes struct {
	cpu, scripts, others time.Duration
}

func (t redisTimes) sub(u redisTimes) redisTimes {
	return redisTimes{cpu: t.cpu - u.cpu, scripts: t.scripts - u.scripts, others: t.others - u.others}
}

// commands is the time Redis spent on a limiter's commands: its script
// calls when it made any (Redis counts the commands a script calls both
// on their own line and within the script's, so the two must not be
// added), all its commands otherwise.
func (t redisTimes) commands() time.Duration {
	if t.scripts > 0 {
		return t.scripts
	}
	return t.others
}

// redisTimesReader returns a function that reads the redisTimes of the
// redis-server at addr.
func redisTimesReader(addr string) (func() redisTimes, func(), error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	read := func() redisTimes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var t redisTimes
		info, err := c.Do(ctx, c.B().Info().Section("cpu").Section("commandstats").Build()).ToString()
		if err != nil {
			return t
		}
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					t.cpu += time.Duration(x * float64(time.Second))
				}
			}
			// cmdstat_evalsha:calls=1,usec=75,usec_per_call=75.00,...
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if !ok || name == line || name == "info" {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseInt(v, 10, 64)
					switch name {
					case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
						t.scripts += time.Duration(us) * time.Microsecond
					default:
						t.others += time.Duration(us) * time.Microsecond
					}
				}
			}
		}
		return t
	}
	return read, c.Close, nil
}
