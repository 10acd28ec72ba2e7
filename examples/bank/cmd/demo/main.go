// Command demo plays the bank scenario of floodgate's seed end to end: a
// Redis, three bankapi replicas behind a forwarding proxy, and the
// scenarios of the seed, each printed as a table and checked. It exits 1
// if any outcome differs from what the scenario promises, so it doubles as
// an end-to-end test.
//
// With REDIS_URL set it uses that Redis (and skips the outage scenario,
// which needs to stop Redis); otherwise it runs an in-process Redis-protocol
// server, so no installation is needed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/scenario"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	f, err := startFleet(ctx, getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	defer f.close()
	fmt.Fprintf(stdout, "Redis %s; replicas 1-3 behind the proxy at %s (their only trusted proxy)\n", f.redisURL, f.proxyURL)
	return scenario.Run(ctx, f, stdout)
}
