package bank

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server's middleware and store must stop on Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
