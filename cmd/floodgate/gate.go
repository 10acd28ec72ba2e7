package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/rlconfig"
)

// configGate answers for the service while it has no configuration, as
// envoyproxy/ratelimit does:
//
//   - Under FORCE_START_WITHOUT_INITIAL_CONFIG, before the first
//     configuration from the xDS server, ShouldRateLimit answers
//     Unavailable ("no rate limit configuration loaded") and POST /json
//     503: Envoy's failure_mode_deny decides, as with upstream's error.
//   - With HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, the health checks
//     (GET /healthcheck, gRPC Check and Watch) fail while the
//     configuration in force has no domain, the time before the first
//     included; the 503's body says why.
//
// A nil *configGate lets everything through.
type configGate struct {
	src         *xdsSource              // nil with files
	config      func() *rlconfig.Config // the configuration in force
	needDomains bool                    // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	server      string                  // the xDS server, for the reason
	// redis is the Redis store's breaker, which the health checks follow
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION); nil when they do not.
	redis interface{ State() gobreaker.State }
}

// newGate returns the gate that c asks for, or nil. breaker is the
// store's, if it has one.
func newGate(c serveConfig, src *xdsSource, config func() *rlconfig.Config, breaker interface{ State() gobreaker.State }) *configGate {
	early := src != nil && c.XDS.ForceStart
	if !c.HealthWithRedis {
		breaker = nil
	}
	if !early && !c.HealthyWithConfig && breaker == nil {
		return nil
	}
	g := &configGate{src: src, config: config, needDomains: c.HealthyWithConfig, redis: breaker}
	if c.XDS != nil {
		g.server = c.XDS.Server
	}
	return g
}

// loaded reports whether a configuration is in force.
func (g *configGate) loaded() bool { return g.src == nil || g.src.loaded() }

// healthy reports whether the health checks may pass, and if not, why.
func (g *configGate) healthy() (bool, string) {
	switch {
	case g.redis != nil && g.redis.State() == gobreaker.StateOpen:
		return false, "Redis is lost: its circuit breaker is open (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)"
	case !g.needDomains:
		return true, ""
	case !g.loaded():
		return false, fmt.Sprintf("no rate limit configuration loaded: waiting for the first from the xDS server %s", g.server)
	case len(g.config().Domains()) == 0:
		return false, "the rate limit configuration in force has no domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)"
	}
	return true, ""
}

const noConfig = "no rate limit configuration loaded"

// serverOptions are the gRPC server's interceptors.
func (g *configGate) serverOptions() []grpc.ServerOption {
	if g == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *configGate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case rlsv3.RateLimitService_ShouldRateLimit_FullMethodName:
		if !g.loaded() {
			return nil, status.Error(codes.Unavailable, noConfig)
		}
	case healthpb.Health_Check_FullMethodName:
		res, err := handler(ctx, req)
		if r, ok := res.(*healthpb.HealthCheckResponse); ok && err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			if ok, _ := g.healthy(); !ok {
				return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
			}
		}
		return res, err
	}
	return handler(ctx, req)
}

// watchRecheck is how often a health Watch stream looks at the
// configuration again: a reload is not announced.
const watchRecheck = time.Second

func (g *configGate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != healthpb.Health_Watch_FullMethodName || !g.needDomains && g.redis == nil {
		return handler(srv, ss)
	}
	w := &gatedWatch{ServerStream: ss, g: g, real: -1, sent: -1}
	ctx, cancel := context.WithCancel(ss.Context())
	var wg sync.WaitGroup
	wg.Go(func() { w.follow(ctx) })
	err := handler(srv, w)
	cancel()
	wg.Wait()
	return err
}

// gatedWatch is a health Watch stream whose SERVING is sent as
// NOT_SERVING while the gate is not healthy, and sent again when that
// changes.
type gatedWatch struct {
	grpc.ServerStream
	g *configGate

	mu   sync.Mutex                                 // serializes the sends
	real healthpb.HealthCheckResponse_ServingStatus // guarded by mu; the health server's last, -1 before
	sent healthpb.HealthCheckResponse_ServingStatus // guarded by mu; the last sent, -1 before
}

func (w *gatedWatch) SendMsg(m any) error {
	res, ok := m.(*healthpb.HealthCheckResponse)
	if !ok {
		return w.ServerStream.SendMsg(m)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.real = res.GetStatus()
	return w.sendLocked()
}

func (w *gatedWatch) sendLocked() error {
	st := w.real
	if ok, _ := w.g.healthy(); st == healthpb.HealthCheckResponse_SERVING && !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if st == w.sent {
		return nil
	}
	w.sent = st
	return w.ServerStream.SendMsg(&healthpb.HealthCheckResponse{Status: st})
}

// follow sends the status again whenever the gate's changes it, until ctx
// ends.
func (w *gatedWatch) follow(ctx context.Context) {
	t := time.NewTicker(watchRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		if w.real >= 0 {
			_ = w.sendLocked() // a failed send ends the handler's stream too
		}
		w.mu.Unlock()
	}
}

// handler gates POST /json and GET /healthcheck of h.
func (g *configGate) handler(h http.Handler) http.Handler {
	if g == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := ""
		switch r.URL.Path {
		case "/json":
			if !g.loaded() {
				reason = noConfig
			}
		case "/healthcheck":
			_, reason = g.healthy()
		}
		if reason == "" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, reason+"\n")
	})
}
