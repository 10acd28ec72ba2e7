package upstats

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/internal/rlstats"
)

// BenchmarkRecorder measures what the statistics add to a ShouldRateLimit
// call: one limit's counts (Limit, over 10,000 keys) and the interceptor
// around the call, statsd to a UDP socket, flushed hourly (no flush in
// the run: the request path's cost alone).
func BenchmarkRecorder(b *testing.B) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	p, _ := strconv.Atoi(port)
	st, err := New(Settings{Statsd: true, Host: "127.0.0.1", Port: p, Protocol: "udp", FlushInterval: time.Hour, Mapping: defaultMapping},
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "bench.user_u" + strconv.Itoa(i)
	}
	icpt := st.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := names[n.Add(1)%keys]
			icpt(context.Background(), nil, info, func(context.Context, any) (any, error) {
				st.Limit(k, rlstats.Counts{TotalHits: 1, WithinLimit: 1})
				return nil, nil
			})
		}
	})
	if b.N >= keys && n.Load() < keys {
		b.Fatalf("%d calls cover fewer than the %d keys claimed", n.Load(), keys)
	}
}
