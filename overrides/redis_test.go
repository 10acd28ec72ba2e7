package overrides_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// prefix is a fresh key prefix for one test, so tests share a Redis
// without cleaning it.
func prefix(t *testing.T) string {
	return "ovr-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// open returns the table of opts, closed when t ends.
func open(t *testing.T, opts overrides.Options) *overrides.Table {
	t.Helper()
	tb, err := overrides.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// raw returns the table of url and prefix as the command reads it.
func raw(t *testing.T, url, prefix string) *overridetable.Table {
	t.Helper()
	tb, err := overridetable.New(overridetable.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func mustRule(t *testing.T, name string, limit int64, window time.Duration) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, floodgate.SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noLeak checks, once t and its cleanups are done, that t left no
// goroutine running: the Table's refresher must stop on Close. A
// rueidis Cluster client leaves a sleeping goroutine of its own for a
// few seconds after Close; that one is not the Table's.
func noLeak(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
	})
}

// clock is a settable clock for NewWithClock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The whole path an operator takes: set an override in Redis, every
// replica's Limiter admits exactly the new limit after a refresh, rm
// restores the base rule, an expiry is honoured without a refresh, and a
// bad entry is skipped, logged and counted.
func TestTableDrivesLimiter(t *testing.T) {
	for name, be := range redistest.Backends(t) {
		t.Run(name, func(t *testing.T) {
			url := be.URL
			noLeak(t)
			ctx := context.Background()
			p := prefix(t)
			key := p + "{overrides}"
			clk := &clock{t: time.Now()}
			var logs syncbuf.Buffer
			reg := prometheus.NewPedanticRegistry()
			tb, err := overrides.NewWithClock(ctx, overrides.Options{
				URL: url, Prefix: p,
				Refresh: time.Hour, // refreshed by hand below
				Logger:  slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg,
			}, clk.now)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			store, err := redisstore.New(ctx, redisstore.Options{URL: url, Prefix: p})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			l, err := floodgate.New(store, floodgate.Options{Timeout: 5 * time.Second, Overrides: tb})
			if err != nil {
				t.Fatal(err)
			}
			api := mustRule(t, "api", 2, time.Minute)
			admitted := func(key string) int {
				t.Helper()
				for n := range 50 {
					d, err := l.Allow(ctx, api, key)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						return n
					}
				}
				return 50
			}
			gauge := func(name string) float64 {
				t.Helper()
				return metric(t, reg, name)
			}
			if mfs, err := reg.Gather(); err != nil || len(mfs) != 4 || mfs[0].GetMetric()[0].GetLabel()[0].GetValue() != key {
				t.Fatalf("metrics = %v, %v; want 4, labelled table=%s", mfs, err, key)
			}

			if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 5, time.Minute), Key: "customer-42"}); err != nil {
				t.Fatal(err)
			}
			if n := admitted("customer-41"); n != 2 {
				t.Fatalf("customer-41 admitted %d; want the base 2", n)
			}
			if _, ok := tb.Override(api, "customer-42"); ok {
				t.Fatal("an override applied before any refresh")
			}
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if n := admitted("customer-42"); n != 5 {
				t.Fatalf("customer-42 admitted %d after a refresh; want the override's 5", n)
			}
			if g, want := gauge("floodgate_overrides_last_refresh_timestamp_seconds"), float64(clk.now().UnixNano())/1e9; g != want {
				t.Errorf("last refresh = %v; want %v, the Table's clock at the refresh", g, want)
			}
			if g := gauge("floodgate_overrides"); g != 1 {
				t.Errorf("floodgate_overrides = %v; want 1", g)
			}

			// rm restores the base rule, whose state is another key
			// (the window is the same, the limit lower): customer-42 has
			// 5 recorded, so the base limit of 2 denies.
			if ok, err := tb.Delete(ctx, "api", "customer-42"); err != nil || !ok {
				t.Fatalf("Delete = %v, %v; want true", ok, err)
			}
			if ok, err := tb.Delete(ctx, "api", "customer-42"); err != nil || ok {
				t.Fatalf("second Delete = %v, %v; want false", ok, err)
			}
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if d, err := l.Allow(ctx, api, "customer-42"); err != nil || d.Allowed || d.Limit != 2 {
				t.Fatalf("after rm = %+v, %v; want denied under the base limit 2", d, err)
			}
			if g := gauge("floodgate_overrides"); g != 0 {
				t.Errorf("floodgate_overrides after rm = %v; want 0", g)
			}

			// An expiry is honoured by the Table's clock, before any
			// refresh; the refresh drops it from the count.
			if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 4, 2*time.Minute), Key: "trial", Expires: clk.now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if n := admitted("trial"); n != 4 {
				t.Fatalf("trial admitted %d; want the override's 4", n)
			}
			clk.add(time.Hour)
			if n := admitted("trial"); n != 2 {
				t.Fatalf("trial admitted %d once expired; want the base 2 (a fresh state: another window)", n)
			}
			if g := gauge("floodgate_overrides"); g != 1 {
				t.Errorf("floodgate_overrides before a refresh = %v; want 1 still", g)
			}
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if g := gauge("floodgate_overrides"); g != 0 {
				t.Errorf("floodgate_overrides after the expiry's refresh = %v; want 0", g)
			}

			// A bad entry, written by hand, is skipped, logged once and
			// counted; the good ones still load.
			if _, err := redistest.Command(be.Holder(t, key), "HSET", key, "api:broken", "limit=lots/1m", "api:nobody", "limit=0/1m"); err != nil {
				t.Fatal(err)
			}
			if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 3, time.Minute), Key: "good"}); err != nil {
				t.Fatal(err)
			}
			// Two full loads (a change between them): the bad entries are
			// logged at the first only.
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 3, time.Minute), Key: "good"}); err != nil {
				t.Fatal(err)
			}
			if err := tb.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if g := gauge("floodgate_overrides_invalid"); g != 2 {
				t.Errorf("floodgate_overrides_invalid = %v; want 2", g)
			}
			if g := gauge("floodgate_overrides"); g != 1 {
				t.Errorf("floodgate_overrides with two bad entries = %v; want the 1 good one", g)
			}
			if n := admitted("good"); n != 3 {
				t.Errorf("good admitted %d; want 3", n)
			}
			if n := admitted("broken"); n != 2 {
				t.Errorf("broken admitted %d; want the base 2", n)
			}
			if l, err := raw(t, url, p).List(ctx); err != nil || len(l.Invalid) != 2 || l.Invalid[0].Field != "api:broken" || l.Invalid[1].Field != "api:nobody" {
				t.Errorf("List's invalid entries = %+v, %v; want api:broken then api:nobody", l, err)
			}
			out := logs.String()
			if strings.Contains(out, "refresh recovered") {
				t.Errorf("a recovery logged where nothing failed:\n%s", out)
			}
			if c := strings.Count(out, "skipping an invalid entry"); c != 2 || !strings.Contains(out, "field=api:broken") || !strings.Contains(out, "field=api:nobody") {
				t.Errorf("log has %d invalid-entry lines; want 2, one per bad field, once each:\n%s", c, out)
			}
		})
	}
}

// The refresher runs by itself: a change is in force within the stated
// Refresh, and Close stops it without leaking a goroutine.
func TestTableRefreshesInBackground(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	url, p := "redis://"+redistest.Addr(t), prefix(t)
	const refresh = 50 * time.Millisecond
	tb, err := overrides.New(ctx, overrides.Options{URL: url, Prefix: p, Refresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	api := mustRule(t, "api", 2, time.Minute)
	set := time.Now()
	if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 7, time.Minute), Key: "k"}); err != nil {
		t.Fatal(err)
	}
	for {
		if r, ok := tb.Override(api, "k"); ok {
			if r.Limit != 7 {
				t.Fatalf("override = %v; want 7/1m", r)
			}
			break
		}
		if time.Since(set) > 20*refresh {
			t.Fatalf("the override was not in force %v after it was set, with a refresh of %v", time.Since(set), refresh)
		}
		time.Sleep(refresh / 10)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	// Closed: what was loaded stays in force, nothing more is read, and
	// the Table edits nothing.
	if _, err := tb.Delete(ctx, "api", "k"); err == nil {
		t.Error("Delete on a closed Table succeeded")
	}
	if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 8, time.Minute), Key: "k"}); err == nil {
		t.Error("Set on a closed Table succeeded")
	}
	if err := tb.Refresh(ctx); err == nil {
		t.Error("Refresh on a closed Table succeeded")
	}
	if ok, err := raw(t, url, p).Delete(ctx, "api", "k"); err != nil || !ok {
		t.Fatalf("Delete through another table = %v, %v; want the override of 7 deleted", ok, err)
	}
	time.Sleep(3 * refresh)
	if r, ok := tb.Override(api, "k"); !ok || r.Limit != 7 {
		t.Errorf("a closed Table's override = %v, %v; want the 7/1m loaded last", r, ok)
	}
}
