package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/overrides"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// Set, Get, List, Delete and Prune, and the version counter every change
// bumps, on a standalone server and a Cluster.
func TestTable(t *testing.T) {
	for name, be := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := prefix(t)
			tb := table(t, be.url, p)
			if tb.Key() != p+"{overrides}" {
				t.Fatalf("Key = %q; want %q", tb.Key(), p+"{overrides}")
			}
			version := func() string {
				v, err := redistest.Command(be.holder(t, tb.Key()), "GET", tb.Key()+":version")
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			l, err := tb.List(ctx)
			if err != nil || l.Version != "" || len(l.Entries) != 0 || len(l.Invalid) != 0 {
				t.Fatalf("List of an empty table = %+v, %v; want nothing, no version", l, err)
			}
			now := time.Now().Truncate(time.Second).UTC()
			a := overrides.Entry{Rule: mustRule(t, "api", 1000, time.Minute), Key: "customer-42"}
			b := overrides.Entry{Rule: mustRule(t, "api", 10, time.Second), Key: "{weird}\n:key", Expires: now.Add(time.Hour)}
			c := overrides.Entry{Rule: mustRule(t, "login", 3, time.Minute), Key: "old", Expires: now.Add(-time.Second)}
			for _, e := range []overrides.Entry{a, b, c} {
				if err := tb.Set(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if v := version(); v != "3" {
				t.Errorf("version after 3 sets = %q; want 3", v)
			}
			if err := tb.Set(ctx, overrides.Entry{Rule: floodgate.Rule{Name: "api"}, Key: "x"}); !errors.Is(err, overrides.ErrInvalidEntry) || !errors.Is(err, floodgate.ErrInvalidRule) {
				t.Errorf("Set of an invalid rule = %v; want ErrInvalidEntry and ErrInvalidRule", err)
			}
			if v := version(); v != "3" {
				t.Errorf("version after a refused set = %q; want 3 still", v)
			}
			got, ok, err := tb.Get(ctx, "api", b.Key)
			if err != nil || !ok || got.Rule != b.Rule || got.Key != b.Key || !got.Expires.Equal(b.Expires) {
				t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, b)
			}
			if _, ok, err := tb.Get(ctx, "web", a.Key); err != nil || ok {
				t.Fatalf("Get of another rule = %v, %v; want none", ok, err)
			}
			l, err = tb.List(ctx)
			if err != nil || l.Version != "3" || len(l.Entries) != 3 || l.Entries[0].Key != a.Key || l.Entries[1].Key != b.Key || l.Entries[2].Key != c.Key {
				t.Fatalf("List = %+v, %v; want version 3, api's two keys in byte order, then login's", l, err)
			}
			// Prune deletes only what expired, and bumps the version.
			if n, err := tb.Prune(ctx, now); err != nil || n != 1 {
				t.Fatalf("Prune = %d, %v; want 1 (the expired one)", n, err)
			}
			if _, ok, _ := tb.Get(ctx, "login", "old"); ok {
				t.Error("the expired override survived Prune")
			}
			if v := version(); v != "4" {
				t.Errorf("version after Prune = %q; want 4", v)
			}
			if ok, err := tb.Delete(ctx, "api", a.Key); err != nil || !ok {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
			if v := version(); v != "5" {
				t.Errorf("version after Delete = %q; want 5", v)
			}
			if ok, err := tb.Delete(ctx, "api", a.Key); err != nil || ok {
				t.Fatalf("Delete again = %v, %v; want false", ok, err)
			}
			if v := version(); v != "5" {
				t.Errorf("version after deleting nothing = %q; want 5 still", v)
			}
			// A field holding garbage: Get says why, List lists it apart.
			if _, err := redistest.Command(be.holder(t, tb.Key()), "HSET", tb.Key(), "api:junk", "1000 per minute"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := tb.Get(ctx, "api", "junk"); !errors.Is(err, overrides.ErrInvalidEntry) {
				t.Errorf("Get of garbage = %v; want ErrInvalidEntry", err)
			}
			l, err = tb.List(ctx)
			if err != nil || len(l.Entries) != 1 || len(l.Invalid) != 1 || l.Invalid[0].Field != "api:junk" || l.Invalid[0].Value != "1000 per minute" || !errors.Is(l.Invalid[0].Err, overrides.ErrInvalidEntry) {
				t.Fatalf("List with garbage = %+v, %v; want 1 entry and api:junk invalid", l, err)
			}
			if n, err := tb.Prune(ctx, now.Add(24*time.Hour)); err != nil || n != 1 {
				t.Fatalf("Prune a day later = %d, %v; want 1 (b), garbage left alone", n, err)
			}
			if l, _ := tb.List(ctx); len(l.Entries) != 0 || len(l.Invalid) != 1 {
				t.Fatalf("after Prune: %+v; want only the garbage", l)
			}
		})
	}
}

// A hash edited by hand, which does not bump the version counter, is
// read at the next full load: after ReloadEvery refreshes.
func TestSourceReloadsEditsByHand(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	tb := table(t, "redis://"+addr, prefix(t))
	if err := tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 5, time.Minute), Key: "a"}); err != nil {
		t.Fatal(err)
	}
	src, err := overrides.NewSource(ctx, tb, overrides.SourceOptions{Refresh: time.Hour, ReloadEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Current().Len() != 1 {
		t.Fatalf("NewSource loaded %d; want 1", src.Current().Len())
	}
	if _, err := redistest.Command(addr, "HSET", tb.Key(), "api:b", "limit=9/1m"); err != nil {
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
func TestSourceWithoutVersionCounter(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	tb := table(t, "redis://"+addr, prefix(t))
	if _, err := redistest.Command(addr, "HSET", tb.Key(), "api:a", "limit=5/1m"); err != nil {
		t.Fatal(err)
	}
	src, err := overrides.NewSource(ctx, tb, overrides.SourceOptions{Refresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	api := mustRule(t, "api", 1, time.Minute)
	if r, ok := src.Override(api, "a"); !ok || r.Limit != 5 {
		t.Fatalf("a = %v, %v; want 5/1m from the first load", r, ok)
	}
	if _, err := redistest.Command(addr, "HSET", tb.Key(), "api:a", "limit=6/1m"); err != nil {
		t.Fatal(err)
	}
	if err := src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := src.Override(api, "a"); !ok || r.Limit != 6 {
		t.Fatalf("a after a hand edit and one refresh = %v, %v; want 6/1m (no counter: a full load)", r, ok)
	}
}

// A Source whose Redis is unreachable starts empty and keeps trying;
// once loaded, a failed refresh keeps the overrides it has. Both are
// logged and counted.
func TestSourceOutage(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now

	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	tb := table(t, "redis://"+dead, "")
	start := time.Now()
	src, err := overrides.NewSource(ctx, tb, overrides.SourceOptions{Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatalf("NewSource with Redis down = %v; want a Source (a service starts during an outage)", err)
	}
	defer src.Close()
	if time.Since(start) > 5*time.Second {
		t.Errorf("NewSource took %v with Redis down", time.Since(start))
	}
	api := mustRule(t, "api", 1, time.Minute)
	if _, ok := src.Override(api, "k"); ok || src.Current().Len() != 0 {
		t.Fatal("a Source that never loaded has overrides")
	}
	if err := src.Refresh(ctx); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Refresh with Redis down = %v; want ErrStoreUnavailable", err)
	}
	if n := metric(t, reg, "floodgate_overrides_refresh_errors_total"); n != 2 {
		t.Errorf("refresh errors = %v; want 2 (NewSource's and Refresh's)", n)
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
	tb2 := table(t, srv.URL(), "")
	if err := tb2.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", 4, time.Minute), Key: "k"}); err != nil {
		t.Fatal(err)
	}
	var logs2 syncbuf.Buffer
	src2, err := overrides.NewSource(ctx, tb2, overrides.SourceOptions{Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs2, nil))})
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
	// Back, empty (no persistence): the Source follows, and says so.
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
	for _, tc := range []struct {
		name string
		opts overrides.Options
		want string
	}{
		{"nothing", overrides.Options{}, "set URL or Client"},
		{"bad URL", overrides.Options{URL: "http://example.com"}, "URL"},
		{"brace", overrides.Options{URL: "redis://192.0.2.1:6379", Prefix: "a{b"}, "brace"},
		{"long prefix", overrides.Options{URL: "redis://192.0.2.1:6379", Prefix: strings.Repeat("p", 65)}, "at most 64"},
		{"negative dial", overrides.Options{URL: "redis://192.0.2.1:6379", DialTimeout: -1}, "negative"},
	} {
		if err := tc.opts.Validate(); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
		if _, err := overrides.NewTable(tc.opts); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewTable = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
	}
	if err := (overrides.Options{URL: "redis://192.0.2.1:6379", Prefix: strings.Repeat("p", 64)}).Validate(); err != nil {
		t.Errorf("a prefix of 64 bytes: %v; want valid", err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := (overrides.Options{URL: "redis://192.0.2.1:6379", Client: client}).Validate(); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), "only one of URL and Client") {
		t.Errorf("URL and Client: %v; want ErrInvalidOptions", err)
	}
	if err := (overrides.Options{Client: client}).Validate(); err != nil {
		t.Errorf("a Client alone: %v; want valid", err)
	}
	tb := table(t, "redis://"+redistest.Addr(t), prefix(t))
	if src, err := overrides.NewSource(context.Background(), tb, overrides.SourceOptions{Refresh: 10 * time.Millisecond}); err != nil {
		t.Errorf("a refresh of 10ms: %v; want accepted", err)
	} else {
		src.Close()
	}
	for _, tc := range []struct {
		name string
		opts overrides.SourceOptions
		want string
	}{
		{"fast refresh", overrides.SourceOptions{Refresh: time.Millisecond}, "below 10ms"},
		{"negative reload", overrides.SourceOptions{ReloadEvery: -1}, "negative"},
	} {
		if _, err := overrides.NewSource(context.Background(), tb, tc.opts); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewSource = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := overrides.NewSource(context.Background(), nil, overrides.SourceOptions{}); !errors.Is(err, overrides.ErrInvalidOptions) {
		t.Errorf("NewSource(nil table) = %v; want ErrInvalidOptions", err)
	}
	reg := prometheus.NewRegistry()
	src, err := overrides.NewSource(context.Background(), tb, overrides.SourceOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := overrides.NewSource(context.Background(), tb, overrides.SourceOptions{Registerer: reg}); !errors.Is(err, overrides.ErrInvalidOptions) || !strings.Contains(err.Error(), "one Source per table") {
		t.Errorf("a second Source of one table on one registerer = %v; want ErrInvalidOptions", err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 4 {
		t.Errorf("after the refused Source, %d metrics registered; want the first Source's 4", len(mfs))
	}
}

// A table holds at most MaxEntries overrides. Set refuses a new one
// beyond it (after deleting the expired ones, which make room), with an
// error wrapping ErrTableFull, and writes nothing; replacing one is not
// adding one. A table written past the bound by hand loads the first
// MaxEntries fields by byte order, whichever were written last, and
// refuses the rest: listed as invalid with ErrTableFull, counted, and
// logged in one line, not one per entry.
func TestTableCap(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	tb := table(t, "redis://"+addr, prefix(t))
	redis := func(args ...string) string {
		t.Helper()
		v, err := redistest.Command(addr, args...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fill := []string{"HSET", tb.Key()}
	for i := range overrides.MaxEntries {
		v := "limit=5/1m"
		if i == 5000 {
			v += ",expires=2020-01-01T00:00:00Z"
		}
		fill = append(fill, fmt.Sprintf("api:k%05d", i), v)
	}
	redis(fill...)
	api := mustRule(t, "api", 1, time.Minute)
	set := func(key string, limit int64) error {
		return tb.Set(ctx, overrides.Entry{Rule: mustRule(t, "api", limit, time.Minute), Key: key})
	}
	if err := set("new", 9); err != nil {
		t.Fatalf("Set into a full table holding an expired override = %v; want it pruned to make room", err)
	}
	if n := redis("HLEN", tb.Key()); n != strconv.Itoa(overrides.MaxEntries) {
		t.Fatalf("HLEN = %s after the set; want %d (api:k05000 pruned, api:new added)", n, overrides.MaxEntries)
	}
	version := redis("GET", tb.Key()+":version")
	err := set("new2", 9)
	if !errors.Is(err, overrides.ErrTableFull) || !strings.Contains(err.Error(), fmt.Sprintf("holds %d overrides", overrides.MaxEntries)) {
		t.Fatalf("Set of a new override into a full table = %v; want ErrTableFull naming the %d held", err, overrides.MaxEntries)
	}
	if errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, overrides.ErrInvalidEntry) {
		t.Errorf("the refusal %v wraps ErrStoreUnavailable or ErrInvalidEntry; it is neither", err)
	}
	if _, ok, _ := tb.Get(ctx, "api", "new2"); ok || redis("GET", tb.Key()+":version") != version || redis("HLEN", tb.Key()) != strconv.Itoa(overrides.MaxEntries) {
		t.Fatal("a refused Set wrote the override or bumped the version")
	}
	if err := set("k00001", 7); err != nil {
		t.Fatalf("Set replacing an override of a full table = %v; want it replaced", err)
	}

	// Past the bound by hand: three fields that sort before every other.
	redis("HSET", tb.Key(), "api:a-1", "limit=6/1m", "api:a-2", "limit=6/1m", "api:a-3", "limit=6/1m")
	l, err := tb.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != overrides.MaxEntries || len(l.Invalid) != 3 {
		t.Fatalf("List of %d fields: %d entries, %d invalid; want %d and 3", overrides.MaxEntries+3, len(l.Entries), len(l.Invalid), overrides.MaxEntries)
	}
	for i, want := range []string{"api:k09998", "api:k09999", "api:new"} {
		b := l.Invalid[i]
		if b.Field != want || !errors.Is(b.Err, overrides.ErrTableFull) || !errors.Is(b.Err, overrides.ErrInvalidEntry) {
			t.Errorf("refused entry %d = %+v; want %s, the last by byte order, with ErrTableFull", i, b, want)
		}
	}
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	src, err := overrides.NewSource(ctx, tb, overrides.SourceOptions{Refresh: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if n := src.Current().Len(); n != overrides.MaxEntries {
		t.Fatalf("the Source loaded %d; want %d", n, overrides.MaxEntries)
	}
	if r, ok := src.Override(api, "a-1"); !ok || r.Limit != 6 {
		t.Errorf("a-1, written last but first by byte order = %v, %v; want its 6/1m", r, ok)
	}
	if r, ok := src.Override(api, "k09999"); ok {
		t.Errorf("k09999, beyond the bound = %v; want refused", r)
	}
	if r, ok := src.Override(api, "new"); ok {
		t.Errorf("new, set through the Table before the hand edit but last by byte order = %v; want refused", r)
	}
	if g := metric(t, reg, "floodgate_overrides_invalid"); g != 3 {
		t.Errorf("floodgate_overrides_invalid = %v; want the 3 refused", g)
	}
	if err := set("k00001", 8); err != nil { // a change: the next refresh loads it all again
		t.Fatal(err)
	}
	if err := src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := src.Override(api, "k00001"); r.Limit != 8 {
		t.Fatalf("k00001 after a change and a refresh = %v; want 8/1m", r)
	}
	out := logs.String()
	if c := strings.Count(out, "more overrides than MaxEntries"); c != 1 || !strings.Contains(out, "refused=3") || !strings.Contains(out, `first_refused=api:k09998`) {
		t.Errorf("%d lines about the excess; want 1, naming the 3 refused and the first of them:\n%s", c, out)
	}
	if strings.Contains(out, "skipping an invalid entry") {
		t.Errorf("an entry refused beyond the bound logged a line of its own:\n%s", out)
	}
}
