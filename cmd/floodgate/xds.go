package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/internal/xds"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// errStoppedBeforeConfig is the service stopped while it waited for its
// first configuration: a clean exit.
var errStoppedBeforeConfig = errors.New("stopped before the first configuration came")

// xdsSource takes the configuration from an xDS server and puts each one
// in force in the rls Server (Server.Apply) before its ACK: the same
// validated Config as files give, swapped whole, so no request sees half
// of two.
type xdsSource struct {
	client *xds.Client
	logger *slog.Logger

	mu      sync.Mutex
	srv     *rls.Server      // guarded by mu; nil until attach
	current *rlconfig.Config // guarded by mu; the last configuration taken
}

// startXDS starts the client. Without FORCE_START_WITHOUT_INITIAL_CONFIG
// it waits for the first configuration, as upstream does, and returns
// errStoppedBeforeConfig if ctx ends first.
func startXDS(ctx context.Context, s *xdsSettings, opts rlconfig.Options, reg prometheus.Registerer, logger *slog.Logger) (*xdsSource, error) {
	x := &xdsSource{logger: logger}
	var err error
	var tlsFn func() (*tls.Config, error)
	if s.TLS != nil {
		if tlsFn, err = clientTLS(*s.TLS, logger); err != nil {
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
	}
	x.client, err = xds.New(xds.Options{
		Server: s.Server, NodeID: s.NodeID, NodeMetadata: s.NodeMetadata, Headers: s.Headers, TLS: tlsFn,
		MaxMessageSize: s.MaxMsgSize, Backoff: s.Backoff, ConfigOptions: opts, Apply: x.apply, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if s.RuntimeIgnored {
		logger.Info("RUNTIME_ROOT is ignored: CONFIG_TYPE=GRPC_XDS_SOTW takes the configuration from the xDS server", "server", s.Server)
	}
	logger.Info("taking the rate-limit configuration from an xDS server", "server", s.Server, "node", s.NodeID, "tls", s.TLS != nil,
		"force_start", s.ForceStart)
	if !s.ForceStart {
		logger.Info("waiting for the first configuration before serving (FORCE_START_WITHOUT_INITIAL_CONFIG is not true)")
		select {
		case <-x.client.Loaded():
		case <-ctx.Done():
			x.Close()
			return nil, errStoppedBeforeConfig
		}
	}
	return x, nil
}

// apply puts a validated configuration in force.
func (x *xdsSource) apply(u xds.Update) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.srv != nil {
		if err := x.srv.Apply(u.Config); err != nil {
			return fmt.Errorf("xds: %w", err)
		}
	}
	x.current = u.Config
	return nil
}

// attach makes srv take each configuration from now on, and the one
// taken before it, if any.
func (x *xdsSource) attach(srv *rls.Server) error {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.srv = srv
	if x.current == nil {
		return nil
	}
	return srv.Apply(x.current)
}

// loaded reports whether a configuration came from the server.
func (x *xdsSource) loaded() bool {
	select {
	case <-x.client.Loaded():
		return true
	default:
		return false
	}
}

// Close stops the client.
func (x *xdsSource) Close() error {
	if x == nil {
		return nil
	}
	return x.client.Close()
}
