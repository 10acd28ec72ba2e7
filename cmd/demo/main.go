// Command demo plays the bank scenario of floodgate's seed end to end and
// checks every outcome: it exits 1 if any differs from what the scenario
// promises, so it doubles as an end-to-end test.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	out := newReport(stdout)
	if err := boundary(ctx, out); err != nil {
		return err
	}
	out.flush()
	if len(out.failures) > 0 {
		return fmt.Errorf("%d outcomes differ from the scenario", len(out.failures))
	}
	fmt.Fprintln(stdout, "\nall scenarios behaved as promised")
	return nil
}
