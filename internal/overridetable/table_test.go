package overridetable_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// prefix is a fresh key prefix for one test, so tests share a Redis
// without cleaning it.
func prefix(t *testing.T) string {
	return "ovt-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

func table(t *testing.T, url, prefix string) *overridetable.Table {
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

// Set, Get, List, Delete and Prune, and the version counter every change
// bumps, on a standalone server and a Cluster.
func TestTable(t *testing.T) {
	for name, be := range redistest.Backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := prefix(t)
			tb := table(t, be.URL, p)
			if tb.Key() != p+"{overrides}" {
				t.Fatalf("Key = %q; want %q", tb.Key(), p+"{overrides}")
			}
			version := func() string {
				v, err := redistest.Command(be.Holder(t, tb.Key()), "GET", tb.Key()+":version")
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			if v, err := tb.Version(ctx); v != "" || err != nil {
				t.Fatalf("Version of an empty table = %q, %v; want none", v, err)
			}
			l, err := tb.List(ctx)
			if err != nil || l.Version != "" || len(l.Entries) != 0 || len(l.Invalid) != 0 {
				t.Fatalf("List of an empty table = %+v, %v; want nothing, no version", l, err)
			}
			now := time.Now().Truncate(time.Second).UTC()
			a := overridetable.Entry{Rule: mustRule(t, "api", 1000, time.Minute), Key: "customer-42"}
			b := overridetable.Entry{Rule: mustRule(t, "api", 10, time.Second), Key: "{weird}\n:key", Expires: now.Add(time.Hour)}
			c := overridetable.Entry{Rule: mustRule(t, "login", 3, time.Minute), Key: "old", Expires: now.Add(-time.Second)}
			for _, e := range []overridetable.Entry{a, b, c} {
				if err := tb.Set(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if v, err := tb.Version(ctx); v != "3" || err != nil || version() != "3" {
				t.Errorf("Version after 3 sets = %q, %v; want 3, as stored", v, err)
			}
			if err := tb.Set(ctx, overridetable.Entry{Rule: floodgate.Rule{Name: "api"}, Key: "x"}); !errors.Is(err, overridetable.ErrInvalidEntry) || !errors.Is(err, floodgate.ErrInvalidRule) {
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
			if _, err := redistest.Command(be.Holder(t, tb.Key()), "HSET", tb.Key(), "api:junk", "1000 per minute"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := tb.Get(ctx, "api", "junk"); !errors.Is(err, overridetable.ErrInvalidEntry) {
				t.Errorf("Get of garbage = %v; want ErrInvalidEntry", err)
			}
			l, err = tb.List(ctx)
			if err != nil || len(l.Entries) != 1 || len(l.Invalid) != 1 || l.Invalid[0].Field != "api:junk" || l.Invalid[0].Value != "1000 per minute" || !errors.Is(l.Invalid[0].Err, overridetable.ErrInvalidEntry) {
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

// Bad options are refused, each problem named.
func TestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts overridetable.Options
		want string
	}{
		{"nothing", overridetable.Options{}, "set URL or Client"},
		{"bad URL", overridetable.Options{URL: "http://example.com"}, "URL"},
		{"brace", overridetable.Options{URL: "redis://192.0.2.1:6379", Prefix: "a{b"}, "brace"},
		{"long prefix", overridetable.Options{URL: "redis://192.0.2.1:6379", Prefix: strings.Repeat("p", 65)}, "at most 64"},
		{"negative dial", overridetable.Options{URL: "redis://192.0.2.1:6379", DialTimeout: -1}, "negative"},
	} {
		if err := tc.opts.Validate(); !errors.Is(err, overridetable.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
		if _, err := overridetable.New(tc.opts); !errors.Is(err, overridetable.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v; want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
	}
	if err := (overridetable.Options{URL: "redis://192.0.2.1:6379", Prefix: strings.Repeat("p", 64)}).Validate(); err != nil {
		t.Errorf("a prefix of 64 bytes: %v; want valid", err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := (overridetable.Options{URL: "redis://192.0.2.1:6379", Client: client}).Validate(); !errors.Is(err, overridetable.ErrInvalidOptions) || !strings.Contains(err.Error(), "only one of URL and Client") {
		t.Errorf("URL and Client: %v; want ErrInvalidOptions", err)
	}
	if err := (overridetable.Options{Client: client}).Validate(); err != nil {
		t.Errorf("a Client alone: %v; want valid", err)
	}
}

// A table holds at most MaxEntries (10,000) overrides. Set refuses a new
// one beyond it (after deleting the expired ones, which make room), with
// an error wrapping ErrTableFull, and writes nothing; replacing one is
// not adding one. Of a table written past the bound by hand, List reads
// the first MaxEntries fields by byte order, whichever were written last,
// and lists the rest as invalid with ErrTableFull.
func TestTableCap(t *testing.T) {
	if overridetable.MaxEntries != 10_000 {
		t.Fatalf("MaxEntries = %d; package overrides documents 10,000", overridetable.MaxEntries)
	}
	ctx := context.Background()
	addr, p := redistest.Addr(t), prefix(t)
	tb := table(t, "redis://"+addr, p)
	redis := func(args ...string) string {
		t.Helper()
		v, err := redistest.Command(addr, args...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fill := []string{"HSET", tb.Key()}
	for i := range overridetable.MaxEntries {
		v := "limit=5/1m"
		if i == 5000 {
			v += ",expires=2020-01-01T00:00:00Z"
		}
		fill = append(fill, fmt.Sprintf("api:k%05d", i), v)
	}
	redis(fill...)
	set := func(key string, limit int64) error {
		return tb.Set(ctx, overridetable.Entry{Rule: mustRule(t, "api", limit, time.Minute), Key: key})
	}
	if err := set("new", 9); err != nil {
		t.Fatalf("Set into a full table holding an expired override = %v; want it pruned to make room", err)
	}
	if n := redis("HLEN", tb.Key()); n != strconv.Itoa(overridetable.MaxEntries) {
		t.Fatalf("HLEN = %s after the set; want %d (api:k05000 pruned, api:new added)", n, overridetable.MaxEntries)
	}
	version := redis("GET", tb.Key()+":version")
	err := set("new2", 9)
	if !errors.Is(err, overridetable.ErrTableFull) || !strings.Contains(err.Error(), fmt.Sprintf("holds %d overrides", overridetable.MaxEntries)) {
		t.Fatalf("Set of a new override into a full table = %v; want ErrTableFull naming the %d held", err, overridetable.MaxEntries)
	}
	if errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, overridetable.ErrInvalidEntry) {
		t.Errorf("the refusal %v wraps ErrStoreUnavailable or ErrInvalidEntry; it is neither", err)
	}
	if _, ok, _ := tb.Get(ctx, "api", "new2"); ok || redis("GET", tb.Key()+":version") != version || redis("HLEN", tb.Key()) != strconv.Itoa(overridetable.MaxEntries) {
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
	if len(l.Entries) != overridetable.MaxEntries || len(l.Invalid) != 3 {
		t.Fatalf("List of %d fields: %d entries, %d invalid; want %d and 3", overridetable.MaxEntries+3, len(l.Entries), len(l.Invalid), overridetable.MaxEntries)
	}
	if e := l.Entries[0]; e.Key != "a-1" || e.Rule.Limit != 6 {
		t.Errorf("first entry = %v; want a-1, written last but first by byte order", e)
	}
	for i, want := range []string{"api:k09998", "api:k09999", "api:new"} {
		b := l.Invalid[i]
		if b.Field != want || !errors.Is(b.Err, overridetable.ErrTableFull) || !errors.Is(b.Err, overridetable.ErrInvalidEntry) {
			t.Errorf("refused entry %d = %+v; want %s, the last by byte order, with ErrTableFull", i, b, want)
		}
	}
}

// A hash that takes more than 64 MiB in Redis (MEMORY USAGE, as package
// overrides documents) is not read: List fails with an error wrapping
// ErrTableFull that names the size and the bound, and Redis sends none
// of the hash. A hash just under the bound, of the longest keys allowed,
// is read whole. Set works under the bound and over it (it does not read
// the hash), and deleting the large field makes the table readable again.
func TestTableByteBound(t *testing.T) {
	const maxBytes = 64 << 20 // as package overrides documents
	for name, be := range redistest.Backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			tb := table(t, be.URL, prefix(t))
			holder := be.Holder(t, tb.Key())
			redis := func(args ...string) string {
				t.Helper()
				v, err := redistest.Command(holder, args...)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			t.Cleanup(func() { redistest.Command(holder, "DEL", tb.Key()) })
			usage := func() int64 {
				t.Helper()
				n, err := strconv.ParseInt(redis("MEMORY", "USAGE", tb.Key(), "SAMPLES", "0"), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			sent := func() int64 { // what the holder has sent to its clients
				t.Helper()
				for line := range strings.Lines(redis("INFO", "stats")) {
					if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
						n, err := strconv.ParseInt(v, 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						return n
					}
				}
				t.Fatal("INFO stats has no total_net_output_bytes")
				return 0
			}
			api := mustRule(t, "api", 5, time.Minute)
			key := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("k", 1<<20-3) } // 1 MiB
			// Just under the bound: overrides of 1 MiB keys, set while the
			// next one, the size of the last, still fits.
			n, last, step := 0, int64(0), int64(0)
			for last+2*step <= maxBytes {
				if err := tb.Set(ctx, overridetable.Entry{Rule: api, Key: key(n)}); err != nil {
					t.Fatalf("Set of override %d under the bound: %v", n, err)
				}
				n++
				u := usage()
				step, last = u-last, u
			}
			if last > maxBytes || maxBytes-last > 3<<20 {
				t.Fatalf("the table takes %d bytes; the test wants it within 3 MiB under %d", last, maxBytes)
			}
			l, err := tb.List(ctx)
			if err != nil || len(l.Entries) != n || len(l.Invalid) != 0 {
				t.Fatalf("List of %d overrides in %d bytes, under the bound: %v; want them all", n, last, err)
			}
			for i, e := range l.Entries {
				if e.Key != key(i) || e.Rule != api {
					t.Fatalf("entry %d = %.20q %v; want %.20q %v", i, e.Key, e.Rule, key(i), api)
				}
			}

			// Past the bound by hand: a field of 4 MiB of garbage.
			redis("HSET", tb.Key(), "api:zzz", strings.Repeat("x", 4<<20))
			over := usage()
			if over <= maxBytes {
				t.Fatalf("the table takes %d bytes after a 4 MiB field; the test wants more than %d", over, maxBytes)
			}
			before := sent()
			l, err = tb.List(ctx)
			if delta := sent() - before; delta > 64<<10 {
				t.Errorf("List of a table over the bound made Redis send %d bytes; want the size alone", delta)
			}
			if l != nil || !errors.Is(err, overridetable.ErrTableFull) || errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, overridetable.ErrInvalidEntry) {
				t.Fatalf("List of a table over the bound = %v entries, %v; want ErrTableFull alone", l != nil, err)
			}
			if want := fmt.Sprintf("%s takes %d bytes in Redis (MEMORY USAGE), more than the %d a table may take", tb.Key(), over, maxBytes); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "HSCAN") {
				t.Errorf("List's error = %v; want it to say %q and how to find the large fields", err, want)
			}
			if _, err := tb.Prune(ctx, time.Now()); !errors.Is(err, overridetable.ErrTableFull) {
				t.Errorf("Prune of a table over the bound = %v; want ErrTableFull (it reads the hash)", err)
			}
			small := overridetable.Entry{Rule: api, Key: "small"}
			if err := tb.Set(ctx, small); err != nil {
				t.Fatalf("Set into a table over the bound = %v; want it stored", err)
			}
			if e, ok, err := tb.Get(ctx, "api", "small"); err != nil || !ok || e.Rule != api {
				t.Fatalf("Get of the override set over the bound = %v, %v, %v", e, ok, err)
			}
			redis("HDEL", tb.Key(), "api:zzz")
			if l, err = tb.List(ctx); err != nil || len(l.Entries) != n+1 || len(l.Invalid) != 0 {
				t.Fatalf("List once the large field is deleted: %v; want the %d overrides", err, n+1)
			}
		})
	}
}

// List reads the version and the entries at one moment, while Sets
// change the table: each Set adds one override and bumps the version,
// so every listing holds as many entries as its version says. A stream
// of Sets does not starve List either (a measure under WATCH and a read
// in MULTI failed 3 times in a row for 117 to 129 of 200 listings).
func TestListWhileSetting(t *testing.T) {
	ctx := context.Background()
	tb := table(t, "redis://"+redistest.Addr(t), prefix(t))
	api := mustRule(t, "api", 5, time.Minute)
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for i := range overridetable.MaxEntries {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := tb.Set(ctx, overridetable.Entry{Rule: api, Key: fmt.Sprintf("k%06d", i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range 200 {
		l, err := tb.List(ctx)
		if err != nil {
			t.Fatalf("List %d while setting = %v", i, err)
		}
		if want := strconv.Itoa(len(l.Entries)); l.Version != want && (l.Version != "" || len(l.Entries) != 0) {
			t.Fatalf("List %d while setting: version %q with %d entries; want them equal", i, l.Version, len(l.Entries))
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A Redis user that may not call MEMORY (an ACL without it; managed
// Redis services that disable it) still reads its overrides, unmeasured,
// as before the byte bound: the bound must not turn every replica's
// overrides off there.
func TestTableWithoutMemoryUsage(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	user := "ovt-nomemory-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := redistest.Command(addr, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-memory"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redistest.Command(addr, "ACL", "DELUSER", user) })
	tb := table(t, "redis://"+user+":pw@"+addr, prefix(t))
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: "pw", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(ctx, c.B().MemoryUsage().Key("x").Build()).Error(); err == nil {
		t.Fatal("the user may call MEMORY USAGE: the test would check nothing")
	}
	e := overridetable.Entry{Rule: mustRule(t, "api", 50, time.Minute), Key: "vip"}
	if err := tb.Set(ctx, e); err != nil {
		t.Fatal(err)
	}
	l, err := tb.List(ctx)
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Key != "vip" || l.Entries[0].Rule.Limit != 50 || len(l.Invalid) != 0 {
		t.Fatalf("List as a user without MEMORY: %+v, %v; want the one override", l, err)
	}
}
