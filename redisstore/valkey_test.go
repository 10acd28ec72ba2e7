package redisstore

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestValkey runs the conformance suite on valkey-server, when it is
// installed. Debian 12 (the machines' distribution) has no valkey package,
// so this test usually skips, in CI too; Debian 13 has one, and
// scripts/test.sh installs it wherever apt offers it.
func TestValkey(t *testing.T) {
	srv := redistest.StartBinary(t, "valkey-server")
	storetest.Run(t, func(t *testing.T) floodgate.Store { return newStoreOn(t, srv.Addr()) })
}
