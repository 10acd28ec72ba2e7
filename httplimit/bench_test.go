package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// benchKeys is the number of distinct client IPs the benchmarks cycle
// through.
const benchKeys = 10_000

// nopWriter is a ResponseWriter that keeps only its header map.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

func benchRequests(b *testing.B) []*http.Request {
	reqs := make([]*http.Request, benchKeys)
	seen := map[string]bool{}
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/pix", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255)
		reqs[i].Header.Set("X-Account", fmt.Sprint("account-", i%1000))
		seen[httplimit.ClientIP(nil)(reqs[i])] = true
	}
	if len(seen) != benchKeys {
		b.Fatalf("%d distinct keys, want %d", len(seen), benchKeys)
	}
	return reqs
}

func benchRule(b *testing.B, name string, limit int64, alg floodgate.Algorithm) floodgate.Rule {
	r, err := floodgate.NewRule(name, limit, time.Minute, alg)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func runBench(b *testing.B, h http.Handler, parallel bool) {
	reqs := benchRequests(b)
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			w := nopWriter{http.Header{}}
			for i := 0; pb.Next(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%benchKeys])
			}
		})
		return
	}
	w := nopWriter{http.Header{}}
	i := 0
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%benchKeys])
		i++
	}
}

// BenchmarkMiddleware measures the cost the middleware adds to a request:
// key functions, the decision, the fields and the context. Allowed paths
// use token buckets, whose state does not grow with b.N.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("baseline-no-middleware", func(b *testing.B) { runBench(b, ok, false) })
	// The core's own cost, to subtract: the same decisions without HTTP.
	b.Run("core-only/memstore/2-limits", func(b *testing.B) {
		ms := memstore.New(memstore.Options{})
		b.Cleanup(func() { ms.Close() })
		lim, _ := floodgate.New(ms, floodgate.Options{Timeout: time.Second})
		ip, acct := benchRule(b, "ip", 1e9, floodgate.TokenBucket), benchRule(b, "acct", 1e9, floodgate.TokenBucket)
		reqs := benchRequests(b)
		keys := make([][2]string, len(reqs))
		for i, r := range reqs {
			keys[i] = [2]string{httplimit.ClientIP(nil)(r), r.Header.Get("X-Account")}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%benchKeys]
			if _, err := lim.Check(context.Background(), floodgate.Hit{Rule: ip, Key: k[0]}, floodgate.Hit{Rule: acct, Key: k[1]}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	ip := func(b *testing.B) httplimit.Limit {
		return httplimit.Limit{Rule: benchRule(b, "ip", 1e9, floodgate.TokenBucket), Key: httplimit.ClientIP(nil)}
	}
	acct := func(b *testing.B) httplimit.Limit {
		return httplimit.Limit{Rule: benchRule(b, "acct", 1e9, floodgate.TokenBucket), Key: httplimit.Header("X-Account")}
	}
	for _, tc := range []struct {
		name     string
		limits   func(b *testing.B) []httplimit.Limit
		parallel bool
	}{
		{"memstore/1-limit", func(b *testing.B) []httplimit.Limit { return []httplimit.Limit{ip(b)} }, false},
		{"memstore/2-limits", func(b *testing.B) []httplimit.Limit { return []httplimit.Limit{ip(b), acct(b)} }, false},
		{"memstore/2-limits-parallel", func(b *testing.B) []httplimit.Limit { return []httplimit.Limit{ip(b), acct(b)} }, true},
		{"memstore/denied", func(b *testing.B) []httplimit.Limit {
			return []httplimit.Limit{{Rule: benchRule(b, "one", 1, floodgate.SlidingWindow), Key: httplimit.ClientIP(nil)}}
		}, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ms := memstore.New(memstore.Options{})
			b.Cleanup(func() { ms.Close() })
			e := newEnv(b, envOptions{store: ms, bare: true, timeout: time.Second})
			runBench(b, e.handler(b, httplimit.Route{Limits: tc.limits(b)}), tc.parallel)
		})
	}
	for _, parallel := range []bool{false, true} {
		b.Run(fmt.Sprintf("redis/2-limits-parallel=%v", parallel), func(b *testing.B) {
			srv := redistest.Start(b)
			rs, err := redisstore.New(context.Background(), redisstore.Options{URL: srv.URL()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { rs.Close() })
			e := newEnv(b, envOptions{store: rs, bare: true, timeout: time.Second})
			runBench(b, e.handler(b, httplimit.Route{Limits: []httplimit.Limit{ip(b), acct(b)}}), parallel)
		})
	}
}
