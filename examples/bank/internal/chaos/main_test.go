package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// load, the proxy and the fault injector must all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
