package bank

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// App is a bank service built from a [Config]: its store, limiter and
// server.
type App struct {
	*Server
	breaker *redisstore.Store // its circuit breaker's state is exported; nil without Redis
	closers []func() error
}

// breakerCooldown is how long the breaker keeps a failed store open before
// it probes again.
const breakerCooldown = 2 * time.Second

// AppOptions holds what an App may be given instead of building it.
type AppOptions struct {
	// Ledger may be shared by replicas in one process; nil means a new one.
	Ledger *Ledger
	// RedisClient, if set, is the client of the Redis store instead of one
	// built from REDIS_URL; the App does not close it.
	RedisClient rueidis.Client
}

// NewApp builds the service that cfg describes: a Redis store behind a
// circuit breaker when REDIS_URL (or opts.RedisClient) is set (it starts
// even while Redis is down), the in-memory store otherwise.
func NewApp(ctx context.Context, cfg Config, logger *slog.Logger, opts AppOptions) (*App, error) {
	a := &App{}
	ledger := opts.Ledger
	if ledger == nil {
		ledger = NewLedger()
	}
	users, err := loadUsers(cfg.UsersFile)
	if err != nil {
		return nil, err
	}
	if cfg.TokenSecret == "" {
		logger.Warn("TOKEN_SECRET is not set: tokens and device cookies are signed with a random secret of this process only")
		cfg.TokenSecret = randomID() + randomID()
	}
	// The process's own metrics (goroutines, heap, resident memory) sit
	// beside the limiter's, so that a leak shows on /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var store floodgate.Store
	var ovr floodgate.Overrides // per-key limits set with floodgate override; Redis only
	ready := func(context.Context) error { return nil }
	if cfg.RedisURL == "" && opts.RedisClient == nil {
		logger.Warn("REDIS_URL is not set: limits are kept in this process's memory and are not shared between replicas")
		ms := memstore.New(memstore.Options{})
		a.closers = append(a.closers, ms.Close)
		store = ms
	} else {
		ropts := redisOptions(cfg, opts)
		ropts.Breaker = breakerstore.Options{
			Cooldown: breakerCooldown,
			OnStateChange: func(from, to breakerstore.State) {
				logger.Warn("store circuit breaker", "store", "redis", "from", from.String(), "to", to.String())
			},
		}
		rs, err := redisstore.New(ctx, ropts)
		if err != nil {
			// The error may quote the URL, password and all.
			return nil, fmt.Errorf("bank: REDIS_URL: %w", redactErr(err, cfg.RedisURL))
		}
		a.closers = append(a.closers, rs.Close)
		store, ready, a.breaker = rs, rs.Ping, rs
		if ovr, err = a.followOverrides(ctx, cfg, opts, reg, logger); err != nil {
			a.Close()
			return nil, err
		}
	}
	limits, err := a.watchLimits(cfg.LimitsFile, reg, logger)
	if err != nil {
		a.Close()
		return nil, err
	}
	// A key's override from Redis over the file's live limits.
	limiter, err := newLimiter(store, cfg, floodgate.Overlay(ovr, limits))
	if err != nil {
		a.Close()
		return nil, err
	}
	srv, err := NewServer(Deps{Config: cfg, Limiter: limiter, Breaker: a.breaker, Ready: ready, Users: users, Ledger: ledger, Logger: logger, Registry: reg})
	if err != nil {
		a.Close()
		return nil, err
	}
	a.Server = srv
	a.closers = append([]func() error{srv.Close}, a.closers...)
	return a, nil
}

// limitsDomain is the domain of LIMITS_FILE's limits.
const limitsDomain = "bank"

// watchLimits returns the live limits of file, reloaded when it changes,
// or nil when file is empty. Each reload is logged and counted in
// floodgate_config_load_success_total or floodgate_config_load_error_total;
// a refused file keeps the limits in force.
func (a *App) watchLimits(file string, reg prometheus.Registerer, logger *slog.Logger) (floodgate.Overrides, error) {
	if file == "" {
		return nil, nil
	}
	ok := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_config_load_success_total", Help: "Reloads of the limits file that took effect."})
	bad := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_config_load_error_total", Help: "Reloads of the limits file that were refused; the limits in force stay."})
	reg.MustRegister(ok, bad)
	w, err := rlconfig.Watch(file, rlconfig.WatchOptions{OnReload: func(cfg *rlconfig.Config, err error) {
		if err != nil {
			bad.Inc()
			logger.Error("LIMITS_FILE refused; the limits in force stay", "file", file, "error", err)
			return
		}
		ok.Inc()
		logger.Info("LIMITS_FILE reloaded", "file", file)
		if !slices.Contains(cfg.Domains(), limitsDomain) {
			logger.Warn("LIMITS_FILE has no domain bank: no live limit applies", "file", file, "domains", cfg.Domains())
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("bank: LIMITS_FILE: %w", err)
	}
	if ds := w.Config().Domains(); !slices.Contains(ds, limitsDomain) {
		w.Close()
		return nil, fmt.Errorf("bank: LIMITS_FILE %s: no domain %q (it has %q): its limits would apply to nothing", file, limitsDomain, ds)
	}
	a.closers = append(a.closers, w.Close)
	return rlconfig.NewRules(limitsDomain, w.Config), nil
}

// newLimiter returns the limiter of the service on store: cfg's decision
// budget and denial cache, and the per-key overrides ovr (nil for none).
func newLimiter(store floodgate.Store, cfg Config, ovr floodgate.Overrides) (*floodgate.Limiter, error) {
	return floodgate.New(store, floodgate.Options{Timeout: cfg.DecisionTimeout, DenialCacheSize: cfg.DenialCacheSize, Overrides: ovr})
}

// followOverrides returns the per-key overrides that operators set in the
// service's Redis (floodgate override set -rule pix -limit 50/1m ACCOUNT),
// refreshed every 5 seconds and exported as floodgate_overrides.
func (a *App) followOverrides(ctx context.Context, cfg Config, opts AppOptions, reg prometheus.Registerer, logger *slog.Logger) (floodgate.Overrides, error) {
	tableOpts := overrides.Options{URL: cfg.RedisURL, Registerer: reg, Logger: logger}
	if opts.RedisClient != nil {
		tableOpts.URL, tableOpts.Client = "", opts.RedisClient
	}
	table, err := overrides.New(ctx, tableOpts)
	if err != nil {
		return nil, fmt.Errorf("bank: overrides: %w", redactErr(err, cfg.RedisURL))
	}
	a.closers = append(a.closers, table.Close) // after the store
	return table, nil
}

// Close releases the server, then the store.
func (a *App) Close() error {
	var errs []error
	for _, c := range a.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

func loadUsers(path string) (*Directory, error) {
	if path == "" {
		return DemoDirectory()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("USERS_FILE: %w", err)
	}
	defer f.Close()
	d, err := ReadUsers(f)
	if err != nil {
		return nil, fmt.Errorf("USERS_FILE %s: %w", path, err)
	}
	return d, nil
}

// randomID returns 16 random bytes in hex.
func randomID() string {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

func redisOptions(cfg Config, opts AppOptions) redisstore.Options {
	if opts.RedisClient != nil {
		return redisstore.Options{Client: opts.RedisClient}
	}
	return redisstore.Options{URL: cfg.RedisURL}
}
