// Package xdstest runs a rate-limit configuration xDS server for tests,
// built as Envoy Gateway builds its own: go-control-plane's
// state-of-the-world server over ADS, on a snapshot cache keyed by node
// id.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is an xDS server on loopback. Its methods are safe for
// concurrent use.
type Server struct {
	Addr  string
	Cache cache.SnapshotCache

	grpc   *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	requests []*discovery.DiscoveryRequest // guarded by mu
	nonces   map[string]string             // guarded by mu; response nonce to its version
	headers  []metadata.MD                 // guarded by mu; of each stream
	changed  chan struct{}                 // guarded by mu; closed and replaced on each request
}

// Start serves on addr ("127.0.0.1:0" for any port; an address a stopped
// Server had, to stand for it restarted), with TLS when cfg is not nil.
// The Server is stopped at the test's end.
func Start(t testing.TB, addr string, cfg *tls.Config) *Server {
	t.Helper()
	var lis net.Listener
	var err error
	// A port just freed by a stopped Server may take a moment to be
	// listened on again.
	for deadline := time.Now().Add(10 * time.Second); ; {
		lis, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: lis.Addr().String(), Cache: cache.NewSnapshotCache(false, cache.IDHash{}, nil), done: make(chan struct{}),
		nonces: map[string]string{}, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	cb := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = append(s.headers, md)
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			s.mu.Lock()
			s.requests = append(s.requests, req)
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			s.mu.Lock()
			s.nonces[resp.GetNonce()] = resp.GetVersionInfo()
			s.mu.Unlock()
		},
	}
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s.grpc = grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, server.NewServer(ctx, s.Cache, cb))
	go func() {
		defer close(s.done)
		_ = s.grpc.Serve(lis)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop closes the listener and every stream at once, as a server that
// dies. It is idempotent.
func (s *Server) Stop() {
	s.cancel()
	s.grpc.Stop()
	<-s.done
}

// Set makes res, under version, the snapshot of node.
func (s *Server) Set(t testing.TB, node, version string, res ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(res))
	for i, r := range res {
		rs[i] = r
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.requests...)
}

// Headers returns the gRPC metadata of each stream opened so far.
func (s *Server) Headers() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metadata.MD(nil), s.headers...)
}

// SentVersion returns the version of the response sent with nonce, and
// whether one was.
func (s *Server) SentVersion(nonce string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.nonces[nonce]
	return v, ok
}

// WaitRequest returns the first request, received or to come, for which
// match is true. It fails the test after 20 seconds.
func (s *Server) WaitRequest(t testing.TB, what string, match func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		reqs, changed := s.requests[seen:], s.changed
		s.mu.Unlock()
		for _, r := range reqs {
			if match(r) {
				return r
			}
		}
		seen += len(reqs)
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("the xDS server received no %s within 20s", what)
		}
	}
}
