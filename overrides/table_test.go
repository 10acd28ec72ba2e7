package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// A hash edited by hand, which does not bump the version counter, is
// read at the next full load: after 3 refreshes here (WithReloadEvery).
func TestTableReloadsEditsByHand(t *testing.T) {
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	if err := raw(t, "redis://"+addr, p).Set(ctx, overridetable.Entry{Rule: mustRule(t, "api", 5, time.Minute), Key: "a"}); err != nil {
		t.Fatal(err)
	}
	src := open(t, overrides.WithReloadEvery(overrides.Options{URL: "redis://" + addr, Prefix: p, Refresh: time.Hour}, 3))
	if src.Len() != 1 {
		t.Fatalf("New loaded %d; want 1", src.Len())
	}
	if _, err := redistest.Command(addr, "HSET", p+"{overrides}", "api:b", "limit=9/1m"); err != nil {
		t.Fatal(err)
	}
	api := mustRule(t, "api", 1, time.Minute)
	for i := 1; i <= 3; i++ {
		if err := src.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		_, ok := src.Override(api, "b")
		if want := i == 3; ok != want {
			t.Fatalf("after refresh %d, the hand-made override applies: %v; want %v (a full load every 3rd)", i, ok, want)
		}
	}
}

// A hash without a version counter (written by hand only) is read in
// full at every refresh.
func TestTableWithoutVersionCounter(t *testing.T) {
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	key := p + "{overrides}"
	if _, err := redistest.Command(addr, "HSET", key, "api:a", "limit=5/1m"); err != nil {
		t.Fatal(err)
	}
	src := open(t, overrides.Options{URL: "redis://" + addr, Prefix: p, Refresh: time.Hour})
	api := mustRule(t, "api", 1, time.Minute)
	if r, ok := src.Override(api, "a"); !ok || r.Limit != 5 {
		t.Fatalf("a = %v, %v; want 5/1m from the first load", r, ok)
	}
	if _, err := redistest.Command(addr, "HSET", key, "api:a", "limit=6/1m"); err != nil {
		t.Fatal(err)
	}
	if err := src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := src.Override(api, "a"); !ok || r.Limit != 6 {
		t.Fatalf("a after a hand edit and one refresh = %v, %v; want 6/1m (no counter: a full load)", r, ok)
	}
}

// A Table whose Redis is unreachable starts empty and keeps trying;
// once loaded, a failed refresh keeps the overrides it has. Both are
// logged and counted.
func TestTableOutage(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now

	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	start := time.Now()
	src, err := overrides.New(ctx, overrides.Options{URL: "redis://" + dead, Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatalf("New with Redis down = %v; want a Table (a service starts during an outage)", err)
	}
	defer src.Close()
	if time.Since(start) > 5*time.Second {
		t.Errorf("New took %v with Redis down", time.Since(start))
	}
	api := mustRule(t, "api", 1, time.Minute)
	if _, ok := src.Override(api, "k"); ok || src.Len() != 0 {
		t.Fatal("a Table that never loaded has overrides")
	}
	if err := src.Refresh(ctx); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Refresh with Redis down = %v; want ErrStoreUnavailable", err)
	}
	if n := metric(t, reg, "floodgate_overrides_refresh_errors_total"); n != 2 {
		t.Errorf("refresh errors = %v; want 2 (New's and Refresh's)", n)
	}
	if c := strings.Count(logs.String(), "refresh failed"); c != 1 {
		t.Errorf("%d refresh failures logged; want 1, the first of the outage:\n%s", c, logs.String())
	}
	for range 11 {
		_ = src.Refresh(ctx)
	}
	if c := strings.Count(logs.String(), "refresh failed"); c != 2 || !strings.Contains(logs.String(), "failed_in_a_row=13") {
		t.Errorf("after 13 failures, %d lines; want 2, the second at the 13th:\n%s", c, logs.String())
	}

	// Loaded once, then Redis stops answering: the overrides stay.
	srv := redistest.Start(t)
	if err := raw(t, srv.URL(), "").Set(ctx, overridetable.Entry{Rule: mustRule(t, "api", 4, time.Minute), Key: "k"}); err != nil {
		t.Fatal(err)
	}
	var logs2 syncbuf.Buffer
	src2, err := overrides.New(ctx, overrides.Options{URL: srv.URL(), Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs2, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	srv.Kill()
	for range 2 {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := src2.Refresh(short)
		cancel()
		if err == nil {
			t.Fatal("Refresh with Redis killed succeeded")
		}
	}
	if r, ok := src2.Override(api, "k"); !ok || r.Limit != 4 {
		t.Errorf("after a failed refresh, Override = %v, %v; want the loaded 4/1m", r, ok)
	}
	// Back, empty (no persistence): the Table follows, and says so.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := src2.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := src2.Override(api, "k"); ok {
		t.Error("the override survived the reload of an empty table")
	}
	if out := logs2.String(); strings.Count(out, "refresh failed") != 1 || !strings.Contains(out, "refresh recovered") || !strings.Contains(out, "failed_in_a_row=2") {
		t.Errorf("logs of a failure and recovery:\n%s", out)
	}
}

// metric returns the value of the gauge or counter name in reg.
func metric(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Bad options are refused, each problem named.
func TestOptionsRejected(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	for _, tc := range []struct {
		name string
		opts overrides.Options
		want string
	}{
		{"nothing", overrides.Options{}, "set URL or Client"},
		{"bad URL", overrides.Options{URL: "http://example.com"}, "URL"},
		{"brace", overrides.Options{URL: url, Prefix: "a{b"}, "brace"},
		{"long prefix", overrides.Options{URL: url, Prefix: strings.Repeat("p", 65)}, "at most 64"},
		{"fast refresh", overrides.Options{URL: url, Refresh: time.Millisecond}, "below 10ms"},
	} {
		if _, err := overrides.New(context.Background(), tc.opts); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := overrides.New(context.Background(), overrides.Options{URL: url, Prefix: "a{b", Refresh: time.Millisecond}); err == nil || strings.Count(err.Error(), "invalid options") != 2 {
		t.Errorf("two bad fields: %v; want both named", err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := overrides.New(context.Background(), overrides.Options{URL: url, Client: client}); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), "only one of URL and Client") {
		t.Errorf("URL and Client: %v; want ErrInvalidOptions", err)
	}
	// The edges accepted: a prefix of 64 bytes, a refresh of 10ms, a
	// Client alone (which Close leaves open).
	tb, err := overrides.New(context.Background(), overrides.Options{Client: client, Prefix: strings.Repeat("p", 64), Refresh: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("a Client, a prefix of 64 bytes, a refresh of 10ms: %v; want accepted", err)
	}
	tb.Close()
	if err := client.Do(context.Background(), client.B().Ping().Build()).Error(); err != nil {
		t.Errorf("the Client after the Table's Close: %v; want it open", err)
	}
	p := prefix(t)
	reg := prometheus.NewRegistry()
	open(t, overrides.Options{URL: url, Prefix: p, Registerer: reg})
	if _, err := overrides.New(context.Background(), overrides.Options{URL: url, Prefix: p, Registerer: reg}); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), "one Table per key prefix") {
		t.Errorf("a second Table of one prefix on one registerer = %v; want ErrInvalidOptions", err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 4 {
		t.Errorf("after the refused Table, %d metrics registered; want the first Table's 4", len(mfs))
	}
}

// A table holds at most 10,000 overrides. A table written past the
// bound by hand loads the first 10,000 fields by byte order, whichever
// were written last, and refuses the rest: counted, and logged in one
// line, not one per entry. Set refuses a new override beyond the bound
// with an error wrapping ErrTableFull. (internal/overridetable's
// TestTableCap holds the Redis side: the script's refusal, the pruning
// that makes room, the listing.)
func TestTableCap(t *testing.T) {
	const maxEntries = 10_000 // as the package documentation says
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	key := p + "{overrides}"
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	tb := open(t, overrides.Options{URL: "redis://" + addr, Prefix: p, Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	// The bound, and three fields more that sort before every other.
	fill := []string{"HSET", key, "api:a-1", "limit=6/1m", "api:a-2", "limit=6/1m", "api:a-3", "limit=6/1m"}
	for i := range maxEntries {
		fill = append(fill, fmt.Sprintf("api:k%05d", i), "limit=5/1m")
	}
	if _, err := redistest.Command(addr, fill...); err != nil {
		t.Fatal(err)
	}
	api := mustRule(t, "api", 1, time.Minute)
	set := func(key string, limit int64) error {
		return tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", limit, time.Minute), Key: key})
	}
	if err := set("new", 9); !errors.Is(err, overrides.ErrTableFull) || errors.Is(err, overrides.ErrInvalidEntry) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Set of a new override into a full table = %v; want ErrTableFull alone", err)
	}
	if err := tb.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tb.Len(); n != maxEntries {
		t.Fatalf("the Table loaded %d; want %d", n, maxEntries)
	}
	if r, ok := tb.Override(api, "a-1"); !ok || r.Limit != 6 {
		t.Errorf("a-1, written last but first by byte order = %v, %v; want its 6/1m", r, ok)
	}
	if r, ok := tb.Override(api, "k09996"); !ok || r.Limit != 5 {
		t.Errorf("k09996, the last within the bound = %v, %v; want its 5/1m", r, ok)
	}
	for _, k := range []string{"k09997", "k09998", "k09999", "new"} {
		if r, ok := tb.Override(api, k); ok {
			t.Errorf("%s, beyond the bound = %v; want refused", k, r)
		}
	}
	if g := metric(t, reg, "floodgate_overrides_invalid"); g != 3 {
		t.Errorf("floodgate_overrides_invalid = %v; want the 3 refused", g)
	}
	if err := set("k00001", 8); err != nil { // a change: the next refresh loads it all again
		t.Fatalf("Set replacing an override of a full table = %v; want it replaced", err)
	}
	if err := tb.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := tb.Override(api, "k00001"); r.Limit != 8 {
		t.Fatalf("k00001 after a change and a refresh = %v; want 8/1m", r)
	}
	out := logs.String()
	if c := strings.Count(out, "more than max_entries overrides"); c != 1 || !strings.Contains(out, "max_entries=10000 refused=3") || !strings.Contains(out, `first_refused=api:k09997`) {
		t.Errorf("%d lines about the excess; want 1, naming the 3 refused and the first of them:\n%s", c, out)
	}
	if strings.Contains(out, "skipping an invalid entry") {
		t.Errorf("an entry refused beyond the bound logged a line of its own:\n%s", out)
	}
}

// A table whose hash takes more than 64 MiB in Redis (the package
// documentation's bound), here a few fields of garbage of 8 MiB written
// by hand, is not read: a refresh keeps the overrides loaded last, is
// counted and logged as a failed refresh naming the size and the bound,
// and the Table's heap does not take the hash. Set still works, and once
// the large fields are deleted the next refresh loads the table.
func TestTableByteBound(t *testing.T) {
	const maxBytes = 64 << 20 // as the package documentation says
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	key := p + "{overrides}"
	t.Cleanup(func() { redistest.Command(addr, "DEL", key) })
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	tb := open(t, overrides.Options{URL: "redis://" + addr, Prefix: p, Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	set := func(key string, limit int64) {
		t.Helper()
		if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", limit, time.Minute), Key: key}); err != nil {
			t.Fatalf("Set of %s: %v", key, err)
		}
	}
	set("a", 5)
	if err := tb.Refresh(ctx); err != nil || tb.Len() != 1 {
		t.Fatalf("Refresh = %v, %d loaded; want a", err, tb.Len())
	}
	for i := range 9 { // one command each: redistest.Command allows a second
		if _, err := redistest.Command(addr, "HSET", key, fmt.Sprintf("api:junk-%d", i), strings.Repeat("x", 8<<20)); err != nil {
			t.Fatal(err)
		}
	}
	set("b", 7) // bumps the version: the next refresh is a full load
	v, err := redistest.Command(addr, "MEMORY", "USAGE", key, "SAMPLES", "0")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.ParseInt(v, 10, 64); n <= maxBytes {
		t.Fatalf("the hash takes %s bytes; the test wants more than %d", v, maxBytes)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err = tb.Refresh(ctx)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, overrides.ErrTableFull) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Refresh of a table over the bound = %v; want ErrTableFull", err)
	}
	// TotalAlloc counts the whole process's goroutines (1.4 MB in a run
	// beside a busy core); a read of the hash would allocate its 72 MiB.
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("the refusing refresh allocated %d bytes; want no more than 8 MiB (the hash, 72 MiB, is not read)", got)
	}
	api := mustRule(t, "api", 1, time.Minute)
	if r, ok := tb.Override(api, "a"); !ok || r.Limit != 5 || tb.Len() != 1 {
		t.Errorf("after the refused load, a = %v, %v, %d loaded; want the 5/1m loaded last, alone", r, ok, tb.Len())
	}
	if _, ok := tb.Override(api, "b"); ok {
		t.Error("b, set after the hash went over the bound, is in force; the hash was read")
	}
	if n := metric(t, reg, "floodgate_overrides_refresh_errors_total"); n != 1 {
		t.Errorf("refresh errors = %v; want 1", n)
	}
	if n := metric(t, reg, "floodgate_overrides_invalid"); n != 0 {
		t.Errorf("floodgate_overrides_invalid = %v; want 0 (the garbage was never read)", n)
	}
	want := fmt.Sprintf("%s takes %s bytes in Redis (MEMORY USAGE), more than the %d a table may take", key, v, maxBytes)
	if out := logs.String(); strings.Count(out, "refresh failed") != 1 || !strings.Contains(out, want) || !strings.Contains(out, "HSCAN") {
		t.Errorf("logs; want one refresh failure saying %q and how to find the fields:\n%s", want, out)
	}
	del := []string{"HDEL", key}
	for i := range 9 {
		del = append(del, fmt.Sprintf("api:junk-%d", i))
	}
	if _, err := redistest.Command(addr, del...); err != nil {
		t.Fatal(err)
	}
	if err := tb.Refresh(ctx); err != nil {
		t.Fatalf("Refresh once the large fields are deleted = %v", err)
	}
	if r, ok := tb.Override(api, "b"); !ok || r.Limit != 7 || tb.Len() != 2 {
		t.Errorf("after the recovery, b = %v, %v, %d loaded; want 7/1m, and a", r, ok, tb.Len())
	}
	if !strings.Contains(logs.String(), "refresh recovered") {
		t.Errorf("no recovery logged:\n%s", logs.String())
	}
}

// Garbage written by hand under the byte bound, 40 values of 1 MiB of
// commas, costs a load no more than its size: each is refused unread
// past 1 KiB (before, each split into a million parts), logged once
// (and again when it changes), and not kept once the load is done.
func TestTableGarbageUnderBound(t *testing.T) {
	const fields = 40
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	key := p + "{overrides}"
	t.Cleanup(func() { redistest.Command(addr, "DEL", key) })
	for i := range fields {
		if _, err := redistest.Command(addr, "HSET", key, fmt.Sprintf("api:g-%02d", i), strings.Repeat(",", 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	var before, loaded, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := open(t, overrides.WithReloadEvery(overrides.Options{URL: "redis://" + addr, Prefix: p, Refresh: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg}, 1))
	runtime.ReadMemStats(&loaded)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got, most := loaded.TotalAlloc-before.TotalAlloc, uint64(fields<<20)*3/2; got > most {
		t.Errorf("loading %d MiB of garbage allocated %d bytes; want at most %d", fields, got, most)
	}
	if kept := int64(after.HeapAlloc) - int64(before.HeapAlloc); kept > 8<<20 {
		t.Errorf("after the load, the heap holds %d bytes more; want under 8 MiB (the garbage is not kept)", kept)
	}
	if g := metric(t, reg, "floodgate_overrides_invalid"); g != fields {
		t.Errorf("floodgate_overrides_invalid = %v; want %d", g, fields)
	}
	if err := tb.Refresh(ctx); err != nil { // a full load (WithReloadEvery 1)
		t.Fatal(err)
	}
	if c := strings.Count(logs.String(), "skipping an invalid entry"); c != fields || !strings.Contains(logs.String(), "value is 1048576 bytes, at most 1024 allowed") {
		t.Errorf("after two loads, %d lines about invalid entries; want %d, once each, giving the size", c, fields)
	}
	if _, err := redistest.Command(addr, "HSET", key, "api:g-07", strings.Repeat(";", 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := tb.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(logs.String(), "skipping an invalid entry"); c != fields+1 {
		t.Errorf("after api:g-07 changed, %d lines about invalid entries; want %d, g-07 again", c, fields+1)
	}
}
