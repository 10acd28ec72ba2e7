package overrides

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of [SourceOptions].
const (
	// DefaultRefresh is how often a Source checks its Table for changes:
	// an override set, changed or removed is in force in every replica
	// at most this long (plus one Redis round trip) later.
	DefaultRefresh = 5 * time.Second
	// DefaultReloadEvery is how many refreshes a Source lets pass between
	// two full loads when the version counter did not move: a hash edited
	// by hand (redis-cli HSET, which does not bump the counter) is in
	// force within DefaultReloadEvery * DefaultRefresh, a minute.
	DefaultReloadEvery = 12
)

// SourceOptions configures a [Source]. The zero value is ready to use.
type SourceOptions struct {
	// Refresh is how often the Source checks the Table: one GET of the
	// version counter, and a full read (HGETALL) only when it moved. Zero
	// means DefaultRefresh (5s); at least 10ms otherwise.
	Refresh time.Duration
	// ReloadEvery is the number of refreshes after which the Source
	// reads the whole hash even though the counter did not move. Zero
	// means DefaultReloadEvery (12); 1 reads it on every refresh.
	ReloadEvery int
	// Logger receives the failed refreshes (the first of an outage, then
	// one line every 12, and the recovery), the invalid entries (each
	// once, when it first appears) and the entries refused beyond
	// MaxEntries (one line whenever their number changes). Nil discards.
	Logger *slog.Logger
	// Registerer, if set, receives the Source's metrics, labelled with
	// the table's key: floodgate_overrides (overrides in force),
	// floodgate_overrides_invalid (stored entries skipped as invalid, or
	// refused beyond MaxEntries, at the last load),
	// floodgate_overrides_refresh_errors_total and
	// floodgate_overrides_last_refresh_timestamp_seconds.
	Registerer prometheus.Registerer
	// Now is the clock that expires overrides; nil means time.Now.
	Now func() time.Time
}

// Validate reports every problem with o, each wrapping
// [ErrInvalidOptions].
func (o SourceOptions) Validate() error {
	var errs []error
	if o.Refresh != 0 && o.Refresh < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("%w: refresh %v is below 10ms", ErrInvalidOptions, o.Refresh))
	}
	if o.ReloadEvery < 0 {
		errs = append(errs, fmt.Errorf("%w: reload every %d refreshes is negative", ErrInvalidOptions, o.ReloadEvery))
	}
	return errors.Join(errs...)
}

// Source is a floodgate.Overrides that follows a [Table]: it keeps the
// overrides in memory, as a [Set] that it swaps atomically, and refreshes
// them in the background every SourceOptions.Refresh. A decision never
// waits on Redis for an override: looking one up is a map lookup, and a
// refresh that fails keeps the overrides of the last one that succeeded
// (logged and counted). Overrides expire on time, by the Source's clock,
// whether or not a refresh ran.
//
// Build one per process with [NewSource], pass it as
// floodgate.Options.Overrides, and Close it on shutdown. It is safe for
// concurrent use.
type Source struct {
	table   *Table
	opts    SourceOptions
	now     func() time.Time
	log     *slog.Logger
	set     atomic.Pointer[Set]
	metrics sourceMetrics

	mu       sync.Mutex        // serializes refreshes; guards the fields below
	version  string            // the counter at the last full load
	loaded   bool              // a full load succeeded
	since    int               // refreshes since the last full load
	reported map[string]string // invalid fields already logged, and their values
	excess   int               // entries refused beyond MaxEntries at the last load
	failing  int               // refreshes failed in a row

	stop context.CancelFunc // ends the refresher's context
	done chan struct{}      // closed when the refresher returned
}

var _ floodgate.Overrides = (*Source)(nil)

type sourceMetrics struct {
	count, invalid, last prometheus.Gauge
	errors               prometheus.Counter
}

// NewSource loads the overrides of t, waiting at most until ctx is done,
// and starts refreshing them. Only bad options fail: a Source whose
// first load fails (Redis down) starts empty, logs the failure and keeps
// trying every Refresh, so a service can start during an outage. The
// caller keeps t, and closes it after the Source.
func NewSource(ctx context.Context, t *Table, opts SourceOptions) (*Source, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: table is nil", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Refresh = cmp.Or(opts.Refresh, DefaultRefresh)
	opts.ReloadEvery = cmp.Or(opts.ReloadEvery, DefaultReloadEvery)
	s := &Source{
		table: t, opts: opts, now: opts.Now, log: opts.Logger,
		reported: map[string]string{}, done: make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.newMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	s.set.Store(newSet(nil, s.now))
	_ = s.Refresh(ctx) // logged and counted
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.run(bg)
	return s, nil
}

func (s *Source) newMetrics(reg prometheus.Registerer) error {
	labels := prometheus.Labels{"table": s.table.Key()}
	s.metrics = sourceMetrics{
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides", ConstLabels: labels,
			Help: "Per-key overrides in force in this process."}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides_invalid", ConstLabels: labels,
			Help: "Stored overrides skipped as invalid, or refused beyond MaxEntries, at the last load (floodgate override ls lists them)."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides_last_refresh_timestamp_seconds", ConstLabels: labels,
			Help: "When the overrides were last refreshed from Redis (Unix time)."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_overrides_refresh_errors_total", ConstLabels: labels,
			Help: "Refreshes of the overrides that failed; the last overrides loaded stay in force."}),
	}
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{s.metrics.count, s.metrics.invalid, s.metrics.last, s.metrics.errors}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("%w: registering the metrics of %s (one Source per table and registerer): %w", ErrInvalidOptions, s.table.Key(), err)
		}
	}
	return nil
}

// Override implements floodgate.Overrides from the overrides loaded last.
func (s *Source) Override(rule floodgate.Rule, key string) (floodgate.Rule, bool) {
	return s.set.Load().Override(rule, key)
}

// Current returns the overrides loaded last (expired ones are dropped at the
// next refresh).
func (s *Source) Current() *Set { return s.set.Load() }

// Refresh brings the overrides up to date now: it reads the version
// counter, and the whole table if the counter moved since the last load
// (or ReloadEvery refreshes passed). The background refresher calls it
// every Refresh; a caller may call it too, for example after editing the
// table. On failure the overrides stay as they were; the error is logged,
// counted and returned.
func (s *Source) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.refresh(ctx)
	if err != nil {
		s.metrics.errors.Inc()
		// The first failure, then one line a failLogEvery: an outage
		// does not write a line per refresh.
		if s.failing%failLogEvery == 0 {
			s.log.LogAttrs(ctx, slog.LevelWarn, "overrides: refresh failed; the last overrides loaded stay in force",
				slog.String("table", s.table.Key()), slog.Int("failed_in_a_row", s.failing+1), slog.Any("error", err))
		}
		s.failing++
		return err
	}
	if s.failing > 0 {
		s.log.LogAttrs(ctx, slog.LevelInfo, "overrides: refresh recovered",
			slog.String("table", s.table.Key()), slog.Int("failed_in_a_row", s.failing))
		s.failing = 0
	}
	s.metrics.last.Set(float64(s.now().UnixNano()) / 1e9)
	return nil
}

// failLogEvery is how many failed refreshes in a row make one log line
// after the first: a minute at the default refresh.
const failLogEvery = 12

// refresh does Refresh's work; s.mu is held.
func (s *Source) refresh(ctx context.Context) error {
	s.since++
	if s.loaded && s.since < s.opts.ReloadEvery {
		v, err := s.table.currentVersion(ctx)
		if err != nil {
			return err
		}
		if v != "" && v == s.version {
			s.expire()
			return nil
		}
	}
	l, err := s.table.List(ctx)
	if err != nil {
		return err
	}
	s.loaded, s.since, s.version = true, 0, l.Version
	s.report(ctx, l.Invalid)
	set := newSet(l.Entries, s.now)
	s.set.Store(set)
	s.metrics.count.Set(float64(set.Len()))
	s.metrics.invalid.Set(float64(len(l.Invalid)))
	return nil
}

// expire drops the overrides that expired from the set (they no longer
// apply already; this keeps the set and its gauge exact). s.mu is held.
func (s *Source) expire() {
	set := s.set.Load()
	if set.next.IsZero() || s.now().Before(set.next) {
		return
	}
	set = newSet(set.Entries(), s.now)
	s.set.Store(set)
	s.metrics.count.Set(float64(set.Len()))
}

// report logs the invalid entries not logged yet (or changed since), once
// each, and the entries refused beyond MaxEntries in one line, whenever
// their number changes. s.mu is held.
func (s *Source) report(ctx context.Context, invalid []Invalid) {
	now := make(map[string]string, min(len(invalid), MaxEntries))
	excess, first := 0, ""
	for _, b := range invalid {
		if errors.Is(b.Err, ErrTableFull) {
			if excess == 0 {
				first = b.Field
			}
			excess++
			continue
		}
		now[b.Field] = b.Value
		if v, ok := s.reported[b.Field]; ok && v == b.Value {
			continue
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "overrides: skipping an invalid entry",
			slog.String("table", s.table.Key()), slog.String("field", truncate(b.Field)),
			slog.String("value", truncate(b.Value)), slog.Any("error", b.Err))
	}
	s.reported = now
	if excess != s.excess && excess > 0 {
		s.log.LogAttrs(ctx, slog.LevelWarn, "overrides: the table holds more overrides than MaxEntries; those beyond, by byte order of their fields, are refused (floodgate override ls lists them)",
			slog.String("table", s.table.Key()), slog.Int("max_entries", MaxEntries), slog.Int("refused", excess),
			slog.String("first_refused", truncate(first)))
	}
	s.excess = excess
}

// run refreshes every Refresh until ctx is done (Close).
func (s *Source) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.opts.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, s.opts.Refresh)
			_ = s.Refresh(rctx) // logged and counted
			cancel()
		}
	}
}

// Close stops the refresher and waits for it; the overrides loaded last
// stay in force for Override. It does not close the Table. Close is safe
// to call more than once.
func (s *Source) Close() error {
	s.stop()
	<-s.done
	return nil
}
