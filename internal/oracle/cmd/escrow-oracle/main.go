// Command escrow-oracle is the oracle of issue 37: it runs replica
// processes that share one Redis and checks that, together, they never
// admitted more than a limit allows (docs/RELIABILITY.md, "The escrow
// oracle"; scripts/escrow-oracle.sh runs every scenario).
//
//	escrow-oracle run -redis redis://127.0.0.1:6379 -redis-pid 1234 -mode direct -scenario stop
//	escrow-oracle check -slack 1ms replica-*.log
//	escrow-oracle replica ...   (what run starts, three times)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate-rl/floodgate/internal/oracle"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	self, err := os.Executable()
	if err == nil {
		err = oracle.Main(ctx, []string{self}, os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "escrow-oracle:", err)
		os.Exit(1)
	}
}
