//go:build base

package main

import (
	"context"
	"slices"

	basefg "github.com/floodgate-rl/floodgate/bench/internal/base"
	basemem "github.com/floodgate-rl/floodgate/bench/internal/base/memstore"
)

// With -tags base, the memory rows of floodgate's store run twice: as the
// library is now, and as scripts/benchbase.sh copied it from a baseline
// commit into internal/base (issue 28's is 65b8f30). Both run in this one
// process, in the same alternating rounds, under the same harness, so the
// table shows the two side by side. scripts/bench.sh makes the copy and
// passes the tag.
func init() {
	at := slices.IndexFunc(peers, func(p peer) bool { return p.name == "floodgate memstore counter" })
	if at < 0 {
		panic("bench: no floodgate memstore rows to put the baseline after")
	}
	suffix := " @" + basefg.BenchBaseCommit
	peers = slices.Insert(peers, at+1,
		peer{name: "floodgate memstore" + suffix, algorithm: "GCRA", build: baseMem(basefg.TokenBucket)},
		peer{name: "floodgate memstore sliding" + suffix, algorithm: "sliding log, exact", build: baseMem(basefg.SlidingWindow)},
		peer{name: "floodgate memstore counter" + suffix, algorithm: "sliding counter", build: baseMem(basefg.SlidingWindowCounter)},
	)
}

// baseLimiter is fgLimiter for the baseline's copy of the library.
type baseLimiter struct {
	l           *basefg.Limiter
	normal, hot basefg.Rule
	s           *basemem.Store
}

func baseMem(alg basefg.Algorithm) func(addr, prefix string) (limiter, error) {
	return func(string, string) (limiter, error) {
		s := basemem.New(basemem.Options{})
		l, err := basefg.New(s, basefg.Options{})
		if err != nil {
			return nil, err
		}
		normal, err := basefg.NewRule("normal", normalLimit, window, alg)
		if err != nil {
			return nil, err
		}
		hot, err := basefg.NewRule("hot", hotLimit, window, alg)
		if err != nil {
			return nil, err
		}
		return &baseLimiter{l: l, normal: normal, hot: hot, s: s}, nil
	}
}

func (b *baseLimiter) Allow(ctx context.Context, key string, hot bool) (bool, error) {
	r := b.normal
	if hot {
		r = b.hot
	}
	d, err := b.l.Allow(ctx, r, key)
	return d.Allowed, err
}

func (b *baseLimiter) Close() { b.s.Close() }
