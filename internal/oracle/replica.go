package oracle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The modes a replica decides in.
const (
	// Direct is today's path: one store call per decision.
	Direct = "direct"
	// Escrow turns on the Limiter's escrow (leases of quota decided in
	// memory): floodgate.Options.Escrow with the run's lease period.
	Escrow = "escrow"
	// Broken is an escrow built wrong on purpose, in the replica: a lease
	// of k units is a plain Take of cost k, stamped at its grant, whose
	// units the replica then hands out from memory for the lease period
	// and refunds unused at its end. A unit used late weighs on the store
	// from the grant, not from its use, so the log's window forgets it
	// too early: the bug of stamping at the grant, which the oracle must
	// catch.
	Broken = "broken"
)

// The roles of a replica's load.
const (
	// Steady asks at Rate per key, always: below each key's limit alone,
	// so that it holds leases at every moment, window edges included.
	Steady = "steady"
	// Burst asks at BurstRate per key during the first BurstShare of
	// every odd window (on the Unix epoch), and not at all otherwise:
	// far past the limit, so that each burst exhausts the quota that the
	// steady replica left.
	Burst = "burst"
)

// Rules returns the rules the oracle drives, one key per algorithm:
// limit per window each, and a token bucket of burst limit/5.
func Rules(limit int64, window time.Duration) []floodgate.Rule {
	return []floodgate.Rule{
		{Name: "oracle-s", Limit: limit, Window: window, Algorithm: floodgate.SlidingWindow},
		{Name: "oracle-f", Limit: limit, Window: window, Algorithm: floodgate.FixedWindow},
		{Name: "oracle-c", Limit: limit, Window: window, Algorithm: floodgate.SlidingWindowCounter},
		{Name: "oracle-t", Limit: limit, Window: window, Algorithm: floodgate.TokenBucket, Burst: max(1, limit/5)},
	}
}

// ReplicaConfig configures one replica process.
type ReplicaConfig struct {
	Index    int    // the replica's number, in its log's header
	Mode     string // Direct, Escrow or Broken
	Role     string // Steady or Burst
	RedisURL string
	Key      string // the key of every rule: one per run
	Log      string // the log's path
	Limit    int64
	Window   time.Duration
	Duration time.Duration // how long the replica drives its load
	// Period is the lease period δ of Escrow and Broken.
	Period time.Duration
	// LeaseUnits is the k of a Broken lease (the token bucket's is at
	// most its burst).
	LeaseUnits int64
	Rate       float64 // per key and second, for Steady
	BurstRate  float64 // per key and second, for Burst
	BurstShare float64 // of a window, for Burst
	Goroutines int     // per key
	Logger     *slog.Logger
	Stderr     io.Writer // where the stacks of a hung replica go; nil means os.Stderr
}

// Hang is how long past the end of its load a replica may take to finish
// its decisions and close its Limiter before it counts as hung.
const Hang = 10 * time.Second

// Tally counts one replica's decisions, the hits it sent the store in
// Takes, and the Leases among them: hits of more than one unit that the
// store granted, which only a replica that decides from leases sends.
type Tally struct {
	Allowed, Denied, Errors, Takes, Leases int64
}

// stats is a Tally being counted.
type stats struct {
	allowed, denied, errors atomic.Int64
}

// countingStore counts the hits of the Takes it passes on, and the
// granted ones of more than one unit.
type countingStore struct {
	floodgate.Store
	takes, leases atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	s.takes.Add(int64(len(hits)))
	res, err := s.Store.Take(ctx, hits)
	for i, r := range res {
		if i < len(hits) && r.Allowed && hits[i].Cost > 1 {
			s.leases.Add(1)
		}
	}
	return res, err
}

// decider decides one request of key under rule.
type decider interface {
	allow(ctx context.Context, rule floodgate.Rule, key string) (bool, error)
	close() error
}

// RunReplica drives cfg's load for cfg.Duration, logging every admission,
// and returns what it decided.
func RunReplica(ctx context.Context, cfg ReplicaConfig) (Tally, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rules := Rules(cfg.Limit, cfg.Window)
	store, err := redisstore.New(ctx, redisstore.Options{URL: cfg.RedisURL, Prefix: "oracle:"})
	if err != nil {
		return Tally{}, fmt.Errorf("oracle: replica %d: %w", cfg.Index, err)
	}
	defer store.Close()
	counted := &countingStore{Store: store}
	dec, err := newDecider(cfg, counted)
	if err != nil {
		return Tally{}, fmt.Errorf("oracle: replica %d: %w", cfg.Index, err)
	}
	w, err := Create(cfg.Log, cfg.Index, cfg.Mode, rules)
	if err != nil {
		dec.close()
		return Tally{}, err
	}
	var stats stats
	end := time.Now().Add(cfg.Duration)
	var wg sync.WaitGroup
	for _, rule := range rules {
		for g := range cfg.Goroutines {
			wg.Go(func() { drive(ctx, cfg, g, end, dec, rule, w, &stats) })
		}
	}
	// A replica that hangs is a finding, not a reason to wait: past its
	// load's end and Hang more, it writes every goroutine's stack (where
	// it hangs) and gives up.
	done := make(chan struct{})
	go func() {
		wg.Wait()
		err = dec.close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(end) + Hang):
		if cfg.Stderr == nil {
			cfg.Stderr = os.Stderr
		}
		pprof.Lookup("goroutine").WriteTo(cfg.Stderr, 2)
		return Tally{}, fmt.Errorf("oracle: replica %d: still deciding %v after its load ended (stacks above)", cfg.Index, Hang)
	}
	t := Tally{Allowed: stats.allowed.Load(), Denied: stats.denied.Load(), Errors: stats.errors.Load(), Takes: counted.takes.Load(), Leases: counted.leases.Load()}
	w.Tally(t)
	return t, errors.Join(err, w.Close())
}

// drive is one goroutine of the load on rule's key, until end.
func drive(ctx context.Context, cfg ReplicaConfig, g int, end time.Time, dec decider, rule floodgate.Rule, w *Writer, stats *stats) {
	rate := cfg.Rate
	if cfg.Role == Burst {
		rate = cfg.BurstRate
	}
	interval := time.Duration(float64(time.Second) * float64(cfg.Goroutines) / rate)
	next := time.Now().Add(interval * time.Duration(g) / time.Duration(cfg.Goroutines))
	logged := false
	for {
		if cfg.Role == Burst {
			next = burstTime(next, cfg.Window, cfg.BurstShare)
		}
		if !next.Before(end) || ctx.Err() != nil {
			return
		}
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		if now := time.Now(); next.Before(now) {
			next = now // behind (a stalled store): no burst to catch up
		}
		sent := time.Now()
		ok, err := dec.allow(ctx, rule, cfg.Key)
		answered := time.Now()
		switch {
		case err != nil:
			stats.errors.Add(1)
			if !logged {
				cfg.Logger.Warn("decision failed; counted as a denial", "rule", rule.Name, "err", err)
				logged = true
			}
		case ok:
			w.Admit(rule.Algorithm, sent, answered)
			stats.allowed.Add(1)
		default:
			stats.denied.Add(1)
		}
	}
}

// burstTime returns t if it lies in a burst (the first share of an odd
// window), or else the start of the next burst.
func burstTime(t time.Time, window time.Duration, share float64) time.Time {
	w := int64(window)
	ns := t.UnixNano()
	i := floorDiv(ns, w)
	if i%2 != 0 && ns-i*w < int64(share*float64(w)) {
		return t
	}
	if i%2 != 0 {
		i++
	}
	return time.Unix(0, (i+1)*w)
}

func newDecider(cfg ReplicaConfig, store floodgate.Store) (decider, error) {
	switch cfg.Mode {
	case Direct:
		lim, err := floodgate.New(store, floodgate.Options{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		return limiter{lim}, nil
	case Escrow:
		opts := floodgate.Options{Escrow: floodgate.Escrow{Period: cfg.Period}, Logger: cfg.Logger}
		lim, err := floodgate.New(store, opts)
		if err != nil {
			return nil, err
		}
		return limiter{lim}, nil
	case Broken:
		lim, err := floodgate.New(store, floodgate.Options{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		return &broken{lim: lim, period: cfg.Period, units: cfg.LeaseUnits, leases: map[string]*lease{}}, nil
	}
	return nil, fmt.Errorf("unknown mode %q (want %s, %s or %s)", cfg.Mode, Direct, Escrow, Broken)
}

// limiter decides with a Limiter: the direct path, or escrow.
type limiter struct{ *floodgate.Limiter }

func (l limiter) allow(ctx context.Context, rule floodgate.Rule, key string) (bool, error) {
	d, err := l.Allow(ctx, rule, key)
	return d.Allowed, err
}

// close returns the units of the leases in hand, with escrow on.
func (l limiter) close() error {
	if c, ok := any(l.Limiter).(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
