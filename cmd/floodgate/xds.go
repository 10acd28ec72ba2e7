package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/rlconfig"
	"github.com/floodgate-rl/floodgate/rlconfig/xds"
	"github.com/floodgate-rl/floodgate/rls"
)

// xdsDebounce is rls's Debounce under xDS: the xdsSource reloads the
// Server itself, before its ACK, so the Watcher's own reload of the same
// files, on the directory's events, would only repeat it. A decade of
// quiet before that reload is never.
const xdsDebounce = 10 * 365 * 24 * time.Hour

// errStoppedBeforeConfig is the service stopped while it waited for its
// first configuration: a clean exit.
var errStoppedBeforeConfig = errors.New("stopped before the first configuration came")

// xdsSource takes the configuration from an xDS server and keeps it in a
// directory that the rls Server watches, in the layout of a Kubernetes
// ConfigMap volume: each configuration a ..vN directory of files, and a
// ..data link swapped atomically to the new one. rls reads such a
// directory whole, so the Server sees each configuration whole or not at
// all, through the same reload as files.
//
// The directory is the bridge until rls can take a configuration from
// memory: it lives under $TMPDIR (or /dev/shm where that is read-only)
// and is removed at Close.
type xdsSource struct {
	client *xds.Client
	dir    string
	logger *slog.Logger

	mu      sync.Mutex
	srv     *rls.Server // guarded by mu; nil until attach
	seq     int         // guarded by mu; the versions written
	current string      // guarded by mu; the version ..data names
}

// startXDS makes the directory, with an empty configuration in it, and
// starts the client. Without FORCE_START_WITHOUT_INITIAL_CONFIG it waits
// for the first configuration, as upstream does, and returns
// errStoppedBeforeConfig if ctx ends first.
func startXDS(ctx context.Context, s *xdsSettings, opts rlconfig.Options, reg prometheus.Registerer, logger *slog.Logger) (*xdsSource, error) {
	dir, err := os.MkdirTemp("", "floodgate-xds-")
	if err != nil {
		// A read-only root file system (Envoy Gateway's default security
		// context) leaves /dev/shm, a tmpfs of the container's own.
		var err2 error
		if dir, err2 = os.MkdirTemp("/dev/shm", "floodgate-xds-"); err2 != nil {
			return nil, fmt.Errorf("%w: CONFIG_TYPE=GRPC_XDS_SOTW keeps the configuration in force in a directory under $TMPDIR (or /dev/shm), "+
				"and neither can be written: %v; %v. Mount an emptyDir and point TMPDIR at it", errConfig, err, err2)
		}
	}
	x := &xdsSource{dir: dir, logger: logger}
	if x.current, err = x.write(nil); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var tlsFn func() (*tls.Config, error)
	if s.TLS != nil {
		if tlsFn, err = clientTLS(*s.TLS, logger); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
	}
	x.client, err = xds.New(xds.Options{
		Server: s.Server, NodeID: s.NodeID, NodeMetadata: s.NodeMetadata, Headers: s.Headers, TLS: tlsFn,
		MaxMessageSize: s.MaxMsgSize, Backoff: s.Backoff, ConfigOptions: opts, Apply: x.apply, Logger: logger, Registerer: reg,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if s.RuntimeIgnored {
		logger.Info("RUNTIME_ROOT is ignored: CONFIG_TYPE=GRPC_XDS_SOTW takes the configuration from the xDS server", "server", s.Server)
	}
	logger.Info("taking the rate-limit configuration from an xDS server", "server", s.Server, "node", s.NodeID, "tls", s.TLS != nil,
		"force_start", s.ForceStart, "dir", dir)
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

// write makes files the next version and swaps ..data to it. It returns
// the version's directory.
func (x *xdsSource) write(files map[string][]byte) (string, error) {
	x.seq++
	ver := filepath.Join(x.dir, fmt.Sprintf("..v%d", x.seq))
	if err := os.Mkdir(ver, 0o700); err != nil {
		return "", fmt.Errorf("xds: write the configuration: %w", err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ver, name), data, 0o600); err != nil {
			os.RemoveAll(ver)
			return "", fmt.Errorf("xds: write the configuration: %w", err)
		}
	}
	if err := x.point(ver); err != nil {
		os.RemoveAll(ver)
		return "", err
	}
	return ver, nil
}

// point swaps ..data to the version ver, atomically.
func (x *xdsSource) point(ver string) error {
	tmp := filepath.Join(x.dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ver), tmp); err != nil {
		return fmt.Errorf("xds: swap the configuration: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(x.dir, "..data")); err != nil {
		return fmt.Errorf("xds: swap the configuration: %w", err)
	}
	return nil
}

// apply puts a validated configuration in force: written, swapped in,
// and reloaded by the Server; on any failure the previous one is put back.
func (x *xdsSource) apply(u xds.Update) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	prev := x.current
	ver, err := x.write(u.Files)
	if err != nil {
		return err
	}
	if x.srv != nil {
		if err := x.srv.Reload(); err != nil {
			if prev != "" {
				x.point(prev)
			}
			os.RemoveAll(ver)
			return fmt.Errorf("xds: reload: %w", err)
		}
	}
	x.current = ver
	if prev != "" {
		os.RemoveAll(prev)
	}
	return nil
}

// attach makes srv reload each configuration from now on, and reloads it
// once, for a configuration swapped in since it read the directory.
func (x *xdsSource) attach(srv *rls.Server) error {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.srv = srv
	return srv.Reload()
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

// Close stops the client and removes the directory.
func (x *xdsSource) Close() error {
	if x == nil {
		return nil
	}
	err := x.client.Close()
	return errors.Join(err, os.RemoveAll(x.dir))
}
