package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
	"github.com/floodgate-rl/floodgate/examples/bank/internal/scenario"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// fleet is the system under demonstration: a Redis (a real one from
// REDIS_URL, or an in-process miniredis speaking the Redis protocol, so
// that the real store code and Lua scripts run), three bank replicas, and
// the forwarding proxy in front of them, their only trusted proxy.
type fleet struct {
	mini     *miniredis.Miniredis // nil with an external REDIS_URL
	redisURL string
	clients  []rueidis.Client
	replicas []*bank.App
	servers  []*http.Server
	proxy    *http.Server
	proxyURL string
	logs     *syncbuf.Buffer // the replicas' logs
}

func startFleet(ctx context.Context, redisURL string) (*fleet, error) {
	f := &fleet{redisURL: redisURL, logs: &syncbuf.Buffer{}}
	if redisURL == "" {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("start miniredis: %w", err)
		}
		f.mini, f.redisURL = m, "redis://"+m.Addr()
	}
	cfg, err := bank.ConfigFromEnv(func(k string) string {
		return map[string]string{
			"REDIS_URL":        f.redisURL,
			"TOKEN_SECRET":     "demo-secret-shared-by-the-three-replicas",
			"TRUSTED_PROXIES":  "127.0.0.1/32",
			"DECISION_TIMEOUT": "300ms", // generous: the in-process Redis shares two cores with everything else
		}[k]
	})
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ledger := bank.NewLedger() // the bank's database, shared by the replicas
	var backends []*url.URL
	for i := range 3 {
		// Each replica has a client of its own, as separate processes would.
		// ForceSingleClient: miniredis answers CLUSTER SLOTS as a one-node
		// Cluster, and the demo shows a standalone Redis.
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{strings.TrimPrefix(f.redisURL, "redis://")}, ForceSingleClient: f.mini != nil, DisableCache: true})
		if err != nil {
			f.close()
			return nil, err
		}
		f.clients = append(f.clients, rc)
		app, err := bank.NewApp(ctx, cfg, logger.With("replica", i+1), bank.AppOptions{Ledger: ledger, RedisClient: rc})
		if err != nil {
			f.close()
			return nil, err
		}
		f.replicas = append(f.replicas, app)
		addr, srv, err := serve(app.Handler())
		if err != nil {
			f.close()
			return nil, err
		}
		f.servers = append(f.servers, srv)
		backends = append(backends, &url.URL{Scheme: "http", Host: addr})
	}
	proxy := scenario.Proxy(backends)
	addr, srv, err := serve(proxy)
	if err != nil {
		f.close()
		return nil, err
	}
	f.proxy, f.proxyURL = srv, "http://"+addr
	return f, nil
}

// serve serves h on a free loopback port.
func serve(h http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().String(), srv, nil
}

// URL implements scenario.Fleet.
func (f *fleet) URL() string { return f.proxyURL }

// CanStopRedis implements scenario.Fleet: the demo can stop only its own
// Redis.
func (f *fleet) CanStopRedis() bool { return f.mini != nil }

// StopRedis implements scenario.Fleet.
func (f *fleet) StopRedis() error {
	f.mini.Close()
	return nil
}

// RestartRedis implements scenario.Fleet; the Redis comes back empty.
func (f *fleet) RestartRedis() error { return f.mini.Restart() }

// Logs implements scenario.Fleet.
func (f *fleet) Logs() string { return f.logs.Take() }

func (f *fleet) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if f.proxy != nil {
		f.proxy.Shutdown(ctx)
	}
	for _, s := range f.servers {
		s.Shutdown(ctx)
	}
	for _, a := range f.replicas {
		a.Close()
	}
	for _, c := range f.clients {
		c.Close()
	}
	if f.mini != nil {
		f.mini.Close()
	}
}
