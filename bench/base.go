//go:build fgbase

package main

import (
	"context"
	"slices"
	"time"

	base "github.com/floodgate-rl/floodgatebase"
	basemem "github.com/floodgate-rl/floodgatebase/memstore"
	baseredis "github.com/floodgate-rl/floodgatebase/redisstore"
)

// This file adds rows of floodgate as it was at an earlier commit (the
// exact log on Redis, and the in-memory store's three algorithms), which
// scripts/bench.sh extracts under the module path
// github.com/floodgate-rl/floodgatebase and builds with the tag fgbase,
// so that the two versions take turns in the same rounds against the same
// redis-server (BENCHMARKS.md, "The command").

// baseRev names the commit of the base row; scripts/bench.sh sets it
// with -ldflags -X.
var baseRev = "base"

func init() {
	p := peer{name: "floodgate @" + baseRev, redis: true, base: true, algorithm: "sliding log, exact", build: baseRedis}
	peers = slices.Insert(peers, 1, p)
	at := slices.IndexFunc(peers, func(p peer) bool { return p.name == "floodgate memstore counter" })
	if at < 0 {
		panic("bench: no floodgate memstore rows to put the baseline after")
	}
	suffix := " @" + baseRev
	peers = slices.Insert(peers, at+1,
		peer{name: "floodgate memstore" + suffix, algorithm: "GCRA", build: baseMem(base.TokenBucket)},
		peer{name: "floodgate memstore sliding" + suffix, algorithm: "sliding log, exact", build: baseMem(base.SlidingWindow)},
		peer{name: "floodgate memstore counter" + suffix, algorithm: "sliding counter", build: baseMem(base.SlidingWindowCounter)},
	)
}

// baseMem is the memory rows' limiter on the base commit's memstore.
func baseMem(alg base.Algorithm) func(addr, prefix string) (limiter, error) {
	return func(string, string) (limiter, error) {
		s := basemem.New(basemem.Options{})
		l, err := base.New(s, base.Options{})
		if err != nil {
			return nil, err
		}
		normal, err := base.NewRule("normal", normalLimit, window, alg)
		if err != nil {
			return nil, err
		}
		hot, err := base.NewRule("hot", hotLimit, window, alg)
		if err != nil {
			return nil, err
		}
		return &baseLimiter{l: l, normal: normal, hot: hot, close: func() { s.Close() }}, nil
	}
}

type baseLimiter struct {
	l           *base.Limiter
	normal, hot base.Rule
	close       func()
}

// baseRedis is floodgateRedis(floodgate.SlidingWindow, denialCacheSize),
// the reference row, on the base commit.
func baseRedis(addr, prefix string) (limiter, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := baseredis.New(ctx, baseredis.Options{URL: "redis://" + addr, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	l, err := base.New(s, base.Options{Timeout: 2 * time.Second, DenialCacheSize: denialCacheSize})
	if err != nil {
		s.Close()
		return nil, err
	}
	normal, err := base.NewRule("normal", normalLimit, window, base.SlidingWindow)
	if err != nil {
		s.Close()
		return nil, err
	}
	hot, err := base.NewRule("hot", hotLimit, window, base.SlidingWindow)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &baseLimiter{l: l, normal: normal, hot: hot, close: func() { s.Close() }}, nil
}

func (b *baseLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	r := b.normal
	if hot {
		r = b.hot
	}
	d, err := b.l.Allow(ctx, r, key)
	return d.Allowed, err
}

func (b *baseLimiter) Close() { b.close() }
