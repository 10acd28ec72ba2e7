package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// grpcTLS is the TLS of the service's gRPC listener
// (GRPC_SERVER_USE_TLS), as envoyproxy/ratelimit reads it.
type grpcTLS struct {
	Cert, Key string // GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY
	ClientCA  string // GRPC_CLIENT_TLS_CACERT (or GRPC_SERVER_TLS_CA_CERT): require and verify client certificates
	ClientSAN string // GRPC_CLIENT_TLS_SAN: the name a client certificate must hold
}

// xdsTLS is the TLS of the connection to the xDS server
// (CONFIG_GRPC_XDS_SERVER_USE_TLS).
type xdsTLS struct {
	Cert, Key string // CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY: the client's certificate
	CA        string // CONFIG_GRPC_XDS_SERVER_TLS_CACERT: added to the system's roots
	SAN       string // CONFIG_GRPC_XDS_SERVER_TLS_SAN: the name the server's certificate must hold; default the address's host
}

// fileCache holds a value read from files and reads it again when one of
// them changes: another file (a Kubernetes secret's update swaps a
// symbolic link), another size or another modification time. It is
// checked on each get, at each TLS handshake: a connection is long-lived,
// and a handshake costs far more than a stat. Its methods are safe for
// concurrent use.
type fileCache[T any] struct {
	paths  []string
	read   func() (T, error)
	what   string
	logger *slog.Logger

	mu    sync.Mutex
	val   T             // guarded by mu
	stats []os.FileInfo // guarded by mu; of the files val was read from
}

// newFileCache reads the value once: an error here is the service's to
// report at start.
func newFileCache[T any](what string, logger *slog.Logger, read func() (T, error), paths ...string) (*fileCache[T], error) {
	c := &fileCache[T]{paths: paths, read: read, what: what, logger: logger}
	stats := c.stat()
	v, err := read()
	if err != nil {
		return nil, err
	}
	c.val, c.stats = v, stats
	return c, nil
}

func (c *fileCache[T]) stat() []os.FileInfo {
	st := make([]os.FileInfo, len(c.paths))
	for i, p := range c.paths {
		st[i], _ = os.Stat(p)
	}
	return st
}

// get returns the value, read again first if a file changed. A file that
// cannot be read keeps the value read before, with a warning.
func (c *fileCache[T]) get() T {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stat()
	same := true
	for i := range st {
		a, b := st[i], c.stats[i]
		if a == nil || b == nil || !os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size() {
			same = false
		}
	}
	if same {
		return c.val
	}
	v, err := c.read()
	if err != nil {
		c.logger.Warn("TLS files changed but cannot be read; the ones read before stay in use", "what", c.what, "files", c.paths, "err", err)
		return c.val
	}
	c.val, c.stats = v, st
	c.logger.Info("TLS files read again", "what", c.what, "files", c.paths)
	return c.val
}

func readPair(cert, key string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		return &pair, nil
	}
}

// readPool reads a PEM bundle of CA certificates, into the system's roots
// when system is true.
func readPool(path string, system bool) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if system {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys
			}
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s holds no PEM certificate", path)
		}
		return pool, nil
	}
}

// serverTLS returns the TLS configuration of the gRPC listener (and of
// JSON_ADDR's), offering the ALPN protocols protos: each
// handshake takes the certificate, and the client CA, from files read
// again when they change, so that a rotated certificate is served without
// a restart. With a client CA, a client must present a certificate it
// signed (and, with a SAN, one that names it).
func serverTLS(s grpcTLS, logger *slog.Logger, protos ...string) (*tls.Config, error) {
	pair, err := newFileCache("gRPC server certificate", logger, readPair(s.Cert, s.Key), s.Cert, s.Key)
	if err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: %w", err)
	}
	var ca *fileCache[*x509.CertPool]
	if s.ClientCA != "" {
		if ca, err = newFileCache("gRPC client CA", logger, readPool(s.ClientCA, false), s.ClientCA); err != nil {
			return nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %w", err)
		}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos, Certificates: []tls.Certificate{*pair.get()}}
			if ca != nil {
				cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.get()
			}
			if s.ClientSAN != "" {
				cfg.VerifyConnection = func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return errors.New("no client certificate")
					}
					return cs.PeerCertificates[0].VerifyHostname(s.ClientSAN)
				}
			}
			return cfg, nil
		},
	}, nil
}

// clientTLS returns what gives the TLS configuration of each connection
// to the xDS server: the CA is read at each connection attempt, the
// client certificate at each handshake when its files changed.
func clientTLS(s xdsTLS, logger *slog.Logger) (func() (*tls.Config, error), error) {
	var pair *fileCache[*tls.Certificate]
	if s.Cert != "" {
		var err error
		if pair, err = newFileCache("xDS client certificate", logger, readPair(s.Cert, s.Key), s.Cert, s.Key); err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY: %w", err)
		}
	}
	roots := func() (*x509.CertPool, error) { return nil, nil } // the system's
	if s.CA != "" {
		roots = readPool(s.CA, true)
		if _, err := roots(); err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
	}
	return func() (*tls.Config, error) {
		pool, err := roots()
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: s.SAN}
		if pair != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
		}
		return cfg, nil
	}, nil
}
