package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServeGRPCUDS: with GRPC_UDS, gRPC is served on that unix socket
// instead of TCP, as envoyproxy/ratelimit serves it; a socket left by a
// killed process is replaced, and GRPC_ADDR beside GRPC_UDS is refused.
func TestServeGRPCUDS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "u.yaml"), []byte("domain: u\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rl.sock")
	// A stale socket: bound, then closed without removing the file.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stale socket is gone before the test: %v", err)
	}

	r := startServe(t, map[string]string{"CONFIG_DIR": dir, "GRPC_UDS": sock, "GRPC_PORT": "8081"})
	if r.grpc != sock {
		t.Errorf("gRPC listens on %q, want the socket %q", r.grpc, sock)
	}
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "u",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 2 {
		t.Errorf("over the socket: %v, want OK with 2 left", resp)
	}

	_, err = parseServe(nil, env(map[string]string{"CONFIG_DIR": dir, "GRPC_UDS": sock, "GRPC_ADDR": ":8081"}))
	if err == nil || !strings.Contains(err.Error(), "GRPC_UDS: is set beside GRPC_ADDR") {
		t.Errorf("GRPC_UDS beside GRPC_ADDR: %v, want it refused", err)
	}
}
