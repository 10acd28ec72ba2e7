// Command bankapi serves floodgate's reference bank: PIX transfers, the
// statement and login, rate limited as the seed describes. It is
// configured from the environment (see docs/BANK.md); a bad configuration
// lists every problem and exits with status 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate/examples/bank/internal/bank"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second signal ends the process at once
	err := run(ctx, os.Getenv, os.Stderr, runOptions{})
	var cfgErr configError
	switch {
	case errors.As(err, &cfgErr):
		fmt.Fprintf(os.Stderr, "bankapi: invalid configuration:\n%v\n", cfgErr.err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bankapi:", err)
		os.Exit(1)
	}
}

type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }

// runOptions are what tests may change in run.
type runOptions struct {
	// ready, if not nil, receives the listening address once the server
	// accepts connections.
	ready chan<- string
	// metricsReady, if not nil, receives the metrics listener's address.
	metricsReady chan<- string
	// timeouts are the server's; zero fields mean bank.DefaultTimeouts.
	timeouts bank.Timeouts
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, getenv func(string) string, logw io.Writer, opts runOptions) error {
	cfg, err := bank.ConfigFromEnv(getenv)
	if err != nil {
		return configError{err}
	}
	var h slog.Handler = slog.NewTextHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel})
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel})
	}
	logger := slog.New(h)
	logger.Info("starting bankapi", "config", cfg)
	app, err := bank.NewApp(ctx, cfg, logger, bank.AppOptions{})
	if err != nil {
		return err
	}
	defer app.Close()
	// The API and the metrics listen apart: METRICS_ADDR is loopback
	// unless configured, so /metrics is never public by accident.
	errLog := slog.NewLogLogger(h, slog.LevelWarn)
	srv := bank.NewHTTPServer(app.Handler(), opts.timeouts, errLog)
	msrv := bank.NewHTTPServer(app.MetricsHandler(), opts.timeouts, errLog)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return err
	}
	mln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("METRICS_ADDR: %w", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- msrv.Serve(mln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "metrics_addr", mln.Addr().String())
	if opts.ready != nil {
		opts.ready <- ln.Addr().String()
	}
	if opts.metricsReady != nil {
		opts.metricsReady <- mln.Addr().String()
	}
	var served error
	select {
	case served = <-errc:
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(served, srv.Shutdown(sctx), msrv.Shutdown(sctx))
}
