package bank

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server's middleware and store must stop on Close. The goroutines of the
// redis-server that redistest starts when FLOODGATE_REDIS_ADDR is unset
// live as long as the test binary, by design.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/floodgate-rl/floodgate/internal/redistest.(*Server).launch.func1"))
}
