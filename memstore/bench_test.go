package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// benchKeys is the number of distinct keys the benchmarks spread over.
const benchKeys = 10_000

func keys(b *testing.B) []string {
	ks := make([]string, benchKeys)
	seen := map[string]bool{}
	for i := range ks {
		ks[i] = "user-" + strconv.Itoa(i)
		seen[ks[i]] = true
	}
	if len(seen) != benchKeys {
		b.Fatalf("%d distinct keys, want %d", len(seen), benchKeys)
	}
	return ks
}

// BenchmarkAllow measures Limiter.Allow on a memstore, in parallel over
// 10,000 keys, every decision allowed: the hot path, which must not
// allocate.
func BenchmarkAllow(b *testing.B) { benchAllow(b, false) }

// BenchmarkPreparedAllow is BenchmarkAllow of the rule prepared
// (Limiter.Prepare).
func BenchmarkPreparedAllow(b *testing.B) { benchAllow(b, true) }

// benchAllow runs BenchmarkAllow, through the prepared rule if prepared.
func benchAllow(b *testing.B, prepared bool) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		b.Run(alg.String(), func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			l, err := floodgate.New(s, floodgate.Options{})
			if err != nil {
				b.Fatal(err)
			}
			// A window short enough that sliding-window logs stay small:
			// far more than the limit never happens per key and window.
			r, err := floodgate.NewRule("bench", 1_000_000, 10*time.Millisecond, alg) // the most a sliding window allows
			if err != nil {
				b.Fatal(err)
			}
			var p *floodgate.Prepared
			if prepared {
				if p, err = l.Prepare(r); err != nil {
					b.Fatal(err)
				}
			}
			ks := keys(b)
			var seq atomic.Uint64
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(1) * 7919
				for pb.Next() {
					i += 7919
					if p != nil {
						d, err := p.Allow(ctx, ks[i%benchKeys])
						if err != nil || !d.Allowed {
							b.Errorf("%+v, %v", d, err) // not Fatal: this is not the benchmark's goroutine
							return
						}
						continue
					}
					d, err := l.Allow(ctx, r, ks[i%benchKeys])
					if err != nil || !d.Allowed {
						b.Errorf("%+v, %v", d, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkAllowDenied measures Allow on one key far over its limit, with
// and without the Limiter's denial cache.
func BenchmarkAllowDenied(b *testing.B) {
	for _, cache := range []int{0, 1000} {
		b.Run("cache="+strconv.Itoa(cache), func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			l, err := floodgate.New(s, floodgate.Options{DenialCacheSize: cache})
			if err != nil {
				b.Fatal(err)
			}
			r, err := floodgate.NewRule("hot", 10, time.Hour, floodgate.SlidingWindow)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for range 10 {
				l.Allow(ctx, r, "hot")
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := l.Allow(ctx, r, "hot"); err != nil || d.Allowed {
						b.Errorf("%+v, %v", d, err) // not Fatal: this is not the benchmark's goroutine
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkCheckMulti measures a two-key check (login by IP and by
// account) in parallel over 10,000 keys.
func BenchmarkCheckMulti(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ip, _ := floodgate.NewRule("ip", 1<<40, 10*time.Millisecond, floodgate.TokenBucket)
	acct, _ := floodgate.NewRule("account", 1<<40, 10*time.Millisecond, floodgate.TokenBucket)
	ks := keys(b)
	var seq atomic.Uint64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for pb.Next() {
			i += 7919
			if _, err := l.Check(ctx, floodgate.Hit{Rule: ip, Key: ks[i%benchKeys]}, floodgate.Hit{Rule: acct, Key: ks[(i/3)%benchKeys]}); err != nil {
				b.Error(err) // not Fatal: this is not the benchmark's goroutine
				return
			}
		}
	})
}
