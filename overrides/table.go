package overrides

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// Options configures a [Table]. Exactly one of URL and Client must be
// set; the other fields may be zero.
type Options struct {
	// URL locates Redis as redisstore.Options.URL does (rueidis.ParseURL:
	// standalone, Sentinel or Cluster; its dial_timeout bounds a
	// connection attempt, a second if it has none). The Table owns the
	// client it builds, connects on first use (so a service can start
	// while Redis is down) and closes it on Close.
	URL string
	// Client is an existing rueidis client, used as it is and never
	// closed by the Table.
	Client rueidis.Client
	// Prefix is the services' key prefix (redisstore.Options.Prefix): the
	// overrides live in "<prefix>{overrides}". Empty means "fg:",
	// redisstore's. At most 64 bytes, without braces.
	Prefix string
	// Refresh is how often the Table checks Redis for changes. Zero
	// means 5s; at least 10ms otherwise.
	Refresh time.Duration
	// Logger receives the failed refreshes (the first of an outage, then
	// one line every 12, and the recovery), the invalid entries (each
	// once, when it first appears) and the entries refused beyond the
	// bound of a table (one line whenever their number changes). Nil
	// discards.
	Logger *slog.Logger
	// Registerer, if set, receives the Table's metrics (see the package
	// documentation).
	Registerer prometheus.Registerer

	// reloadEvery is the number of refreshes after which the Table reads
	// the whole hash even though the version counter did not move; zero
	// means the package doc's 12. The tests set it (export_test.go).
	reloadEvery int
}

// validate reports every problem with o, each wrapping
// [ErrInvalidOptions].
func (o Options) validate() error {
	errs := []error{overridetable.Options{URL: o.URL, Client: o.Client, Prefix: o.Prefix}.Validate()}
	if o.Refresh != 0 && o.Refresh < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("%w: refresh %v is below 10ms", ErrInvalidOptions, o.Refresh))
	}
	return errors.Join(errs...)
}

// defaultReloadEvery is the refreshes between two full loads: with the
// default Refresh, a hash edited by hand is read within a minute.
const defaultReloadEvery = 12

// Table is the per-key overrides of one key prefix, held in Redis and
// followed in memory, as a [Set] that it swaps atomically: a
// floodgate.Overrides whose lookups never wait on Redis (the package
// documentation says when a change is in force). [Table.Set] and
// [Table.Delete] edit the overrides of every replica, as floodgate
// override set and rm do.
//
// Build one per process with [New], pass it as
// floodgate.Options.Overrides, and Close it on shutdown. It is safe for
// concurrent use.
type Table struct {
	store   *overridetable.Table
	key     string // the hash's name, the label of the metrics and logs
	opts    Options
	now     func() time.Time
	log     *slog.Logger
	set     atomic.Pointer[Set]
	metrics tableMetrics

	mu       sync.Mutex        // serializes refreshes; guards the fields below
	version  string            // the counter at the last full load
	loaded   bool              // a full load succeeded
	since    int               // refreshes since the last full load
	reported map[uint64]uint64 // invalid fields already logged, and their values, hashed (seed)
	seed     maphash.Seed      // of reported: a field or value may take up to a MiB or more
	excess   int               // entries refused beyond MaxEntries at the last load
	failing  int               // refreshes failed in a row

	stop context.CancelFunc // ends the refresher's context
	done chan struct{}      // closed when the refresher returned
}

var _ floodgate.Overrides = (*Table)(nil)

type tableMetrics struct {
	count, invalid, last prometheus.Gauge
	errors               prometheus.Counter
}

// New returns the overrides table that opts locates, loaded (waiting at
// most until ctx is done), and starts refreshing it. Only bad options
// fail: a Table whose first load fails (Redis down) starts empty, logs
// the failure and keeps trying every Refresh, so a service can start
// during an outage.
func New(ctx context.Context, opts Options) (*Table, error) {
	return newTable(ctx, opts, time.Now)
}

// newTable is New with the clock that expires overrides.
func newTable(ctx context.Context, opts Options, now func() time.Time) (*Table, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	store, err := overridetable.New(overridetable.Options{URL: opts.URL, Client: opts.Client, Prefix: opts.Prefix})
	if err != nil {
		return nil, err
	}
	opts.Refresh = cmp.Or(opts.Refresh, overridetable.DefaultRefresh)
	opts.reloadEvery = cmp.Or(opts.reloadEvery, defaultReloadEvery)
	t := &Table{
		store: store, key: store.Key(), opts: opts, now: now, log: opts.Logger,
		reported: map[uint64]uint64{}, seed: maphash.MakeSeed(), done: make(chan struct{}),
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if err := t.newMetrics(opts.Registerer); err != nil {
		store.Close()
		return nil, err
	}
	t.set.Store(newSet(nil, t.now))
	_ = t.Refresh(ctx) // logged and counted
	bg, stop := context.WithCancel(context.Background())
	t.stop = stop
	go t.run(bg)
	return t, nil
}

func (t *Table) newMetrics(reg prometheus.Registerer) error {
	labels := prometheus.Labels{"table": t.key}
	t.metrics = tableMetrics{
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides", ConstLabels: labels,
			Help: "Per-key overrides in force in this process."}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides_invalid", ConstLabels: labels,
			Help: "Stored overrides skipped as invalid, or refused beyond the most a table holds, at the last load (floodgate override ls lists them)."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_overrides_last_refresh_timestamp_seconds", ConstLabels: labels,
			Help: "When the overrides were last refreshed from Redis (Unix time)."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_overrides_refresh_errors_total", ConstLabels: labels,
			Help: "Refreshes of the overrides that failed; the last overrides loaded stay in force."}),
	}
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{t.metrics.count, t.metrics.invalid, t.metrics.last, t.metrics.errors}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("%w: registering the metrics of %s (one Table per key prefix and registerer): %w", ErrInvalidOptions, t.key, err)
		}
	}
	return nil
}

// Override implements floodgate.Overrides from the overrides loaded last.
func (t *Table) Override(rule floodgate.Rule, key string) (floodgate.Rule, bool) {
	return t.set.Load().Override(rule, key)
}

// Set stores e, replacing any override of the same rule name and key, or
// refuses it with an error wrapping [ErrInvalidEntry] if it is invalid
// (see Validation in the package doc). Like any change it is in force at the replicas'
// next refresh, this Table's included ([Table.Refresh] applies it here at
// once). A new override into a full table first deletes the overrides
// that expired by this machine's clock; if that makes no room, Set
// writes nothing and returns an error wrapping [ErrTableFull].
func (t *Table) Set(ctx context.Context, e Entry) error {
	return t.store.Set(ctx, overridetable.Entry(e))
}

// Delete removes the override of key under the rule named rule, and
// reports whether there was one. The rule's own limit applies again to
// key at the replicas' next refresh.
func (t *Table) Delete(ctx context.Context, rule, key string) (bool, error) {
	return t.store.Delete(ctx, rule, key)
}

// Refresh brings the overrides up to date now, as the background
// refresher does every Options.Refresh; a caller may call it too, for
// example after editing the table. On failure the overrides stay as they
// were; the error is logged, counted and returned.
func (t *Table) Refresh(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.refresh(ctx)
	if err != nil {
		t.metrics.errors.Inc()
		// The first failure, then one line a failLogEvery: an outage
		// does not write a line per refresh.
		if t.failing%failLogEvery == 0 {
			t.log.LogAttrs(ctx, slog.LevelWarn, "overrides: refresh failed; the last overrides loaded stay in force",
				slog.String("table", t.key), slog.Int("failed_in_a_row", t.failing+1), slog.Any("error", err))
		}
		t.failing++
		return err
	}
	if t.failing > 0 {
		t.log.LogAttrs(ctx, slog.LevelInfo, "overrides: refresh recovered",
			slog.String("table", t.key), slog.Int("failed_in_a_row", t.failing))
		t.failing = 0
	}
	t.metrics.last.Set(float64(t.now().UnixNano()) / 1e9)
	return nil
}

// failLogEvery is how many failed refreshes in a row make one log line
// after the first: a minute at the default refresh.
const failLogEvery = 12

// refresh does Refresh's work; t.mu is held.
func (t *Table) refresh(ctx context.Context) error {
	t.since++
	if t.loaded && t.since < t.opts.reloadEvery {
		v, err := t.store.Version(ctx)
		if err != nil {
			return err
		}
		if v != "" && v == t.version {
			t.expire()
			return nil
		}
	}
	l, err := t.store.List(ctx)
	if err != nil {
		return err
	}
	t.loaded, t.since, t.version = true, 0, l.Version
	t.report(ctx, l.Invalid)
	entries := make([]Entry, len(l.Entries))
	for i, e := range l.Entries {
		entries[i] = Entry(e)
	}
	set := newSet(entries, t.now)
	t.set.Store(set)
	t.metrics.count.Set(float64(set.len()))
	t.metrics.invalid.Set(float64(len(l.Invalid)))
	return nil
}

// expire drops the overrides that expired from the set (they no longer
// apply already; this keeps the set and its gauge exact). t.mu is held.
func (t *Table) expire() {
	set := t.set.Load()
	if set.next.IsZero() || t.now().Before(set.next) {
		return
	}
	set = newSet(set.list(), t.now)
	t.set.Store(set)
	t.metrics.count.Set(float64(set.len()))
}

// report logs the invalid entries not logged yet (or changed since), once
// each, and the entries refused beyond MaxEntries in one line, whenever
// their number changes. t.mu is held.
func (t *Table) report(ctx context.Context, invalid []overridetable.Invalid) {
	now := make(map[uint64]uint64, min(len(invalid), overridetable.MaxEntries))
	excess, first := 0, ""
	for _, b := range invalid {
		if errors.Is(b.Err, ErrTableFull) {
			if excess == 0 {
				first = b.Field
			}
			excess++
			continue
		}
		f, v := maphash.String(t.seed, b.Field), maphash.String(t.seed, b.Value)
		now[f] = v
		if was, ok := t.reported[f]; ok && was == v {
			continue
		}
		t.log.LogAttrs(ctx, slog.LevelWarn, "overrides: skipping an invalid entry",
			slog.String("table", t.key), slog.String("field", overridetable.Truncate(b.Field)),
			slog.String("value", overridetable.Truncate(b.Value)), slog.Any("error", b.Err))
	}
	t.reported = now
	if excess != t.excess && excess > 0 {
		t.log.LogAttrs(ctx, slog.LevelWarn, "overrides: the table holds more than max_entries overrides; those beyond, by byte order of their fields, are refused (floodgate override ls lists them)",
			slog.String("table", t.key), slog.Int("max_entries", overridetable.MaxEntries), slog.Int("refused", excess),
			slog.String("first_refused", overridetable.Truncate(first)))
	}
	t.excess = excess
}

// run refreshes every Refresh until ctx is done (Close).
func (t *Table) run(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.opts.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, t.opts.Refresh)
			_ = t.Refresh(rctx) // logged and counted
			cancel()
		}
	}
}

// Close stops the refresher and waits for it, then closes the client the
// Table built from a URL (a Client passed in Options stays open). The
// overrides loaded last stay in force for Override; Set, Delete and
// Refresh fail. Close is safe to call more than once.
func (t *Table) Close() error {
	t.stop()
	<-t.done
	return t.store.Close()
}
