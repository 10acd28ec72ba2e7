package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// randomPrefix returns a fresh key prefix, so that tests never share state
// on a shared server and never need a FLUSHDB.
func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "fgtest:" + hex.EncodeToString(b[:]) + ":"
}

// newStore returns a store on the shared test Redis, with a random prefix,
// closed when t ends.
func newStore(t testing.TB) *Store {
	t.Helper()
	return newStoreOn(t, redistest.Addr(t))
}

func newStoreOn(t testing.TB, addr string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := New(ctx, Options{URL: "redis://" + addr, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawClient returns a plain client on the shared test Redis, to look at
// what the store wrote.
func rawClient(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func mustRule(t testing.TB, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

var algorithms = []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) floodgate.Store { return newStore(t) })
}

func TestKeyLayout(t *testing.T) {
	s := &Store{prefix: "fg:"}
	for _, tc := range []struct {
		name, key string
		alg       floodgate.Algorithm
		want      string
	}{
		{"login", "alice@example.com", floodgate.SlidingWindow, "fg:{login:alice@example.com}:w:1m0s"},
		{"pix", "acct-42", floodgate.TokenBucket, "fg:{pix:acct-42}:t:1m0s"},
		{"api", "192.0.2.1", floodgate.FixedWindow, "fg:{api:192.0.2.1}:f:1m0s"},
		{"api", "192.0.2.1", floodgate.SlidingWindowCounter, "fg:{api:192.0.2.1}:c:1m0s"},
		{"login", "{evil}", floodgate.SlidingWindow, "fg:{login:~"},
	} {
		p, err := params(floodgate.Hit{Rule: mustRule(t, tc.name, 10, time.Minute, tc.alg), Key: tc.key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := s.tag(tc.name, tc.key) + p.suffix
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("key of %s/%q: got %q, want %q", tc.name, tc.key, got, tc.want)
		}
	}
}

// TestHostileKeysHaveOneHashTag checks that no client-supplied key can
// add, move or break the hash tag that pins a key to a Cluster slot, nor
// bring megabytes into Redis.
func TestHostileKeysHaveOneHashTag(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "hostile", 5, time.Minute, floodgate.SlidingWindow)
	for _, k := range []string{
		"{a}", "a}{b", "}{", "{{}}", "line\nbreak", "\r\n", "nul\x00", "\xff\xfe", strings.Repeat("m", bounds.KeyLen), "ok-key",
	} {
		key := stateKey(s, r, k)
		if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || strings.Index(key, "{") > strings.Index(key, "}") {
			t.Errorf("key %.20q: store key %q must have exactly one hash tag", k, key)
		}
		if len(key) > 100 {
			t.Errorf("key of %d bytes: store key is %d bytes; long keys must be digested", len(k), len(key))
		}
		if _, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: k, Cost: 1}}); err != nil {
			t.Fatalf("key %.20q: %v", k, err)
		}
		if n := ringLen(t, c, key); n != 1 {
			t.Errorf("key %.20q: ring %s holds %d, want 1", k, key, n)
		}
	}
}

// TestEveryKeyHasTTL checks that every key a take or refund writes expires
// within the rule's window.
func TestEveryKeyHasTTL(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	tag := s.tag("ttl", "k")
	want := []string{tag + "w:1m0s", tag + "t:1m0s", tag + "f:1m0s", tag + "c:1m0s"}
	for _, alg := range algorithms {
		r := mustRule(t, "ttl", 10, time.Minute, alg)
		hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 3}}
		res, err := s.Take(ctx(t), hits)
		if err != nil {
			t.Fatal(err)
		}
		// The refund's tombstone, named by the take's name.
		want = append(want, tag+"r:"+stateSuffix(r)+":"+takeID(res[0].Stamp.Take))
		if _, err := s.Take(ctx(t), hits); err != nil {
			t.Fatal(err)
		}
		if err := s.Refund(ctx(t), receipts(hits, res)); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Do(ctx(t), c.B().Keys().Pattern(s.prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	for _, k := range keys {
		ttl, err := c.Do(ctx(t), c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		life := time.Minute // a counter's state weighs on the next window too
		if strings.Contains(k, ":c:") && !strings.Contains(k, ":r:") {
			life = 2 * time.Minute
		}
		if ttl <= 0 || ttl > life.Milliseconds() {
			t.Errorf("PTTL %s = %d; every key must expire within %v", k, ttl, life)
		}
	}
}

func p(t testing.TB, alg floodgate.Algorithm) hitParams {
	hp, err := params(floodgate.Hit{Rule: mustRule(t, "x", 10, time.Minute, alg), Key: "k", Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	return hp
}

// TestOneInstantCountsEveryUnit records three takes in one script call,
// where TIME is frozen: every unit of each must count, at one instant.
func TestOneInstantCountsEveryUnit(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "same", 10, time.Minute, floodgate.SlidingWindow)
	hit := []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}
	res, err := runGroups(ctx(t), s, []group{{1, hit}, {2, hit}, {3, []floodgate.Hit{{Rule: r, Key: "k", Cost: 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0][0].Remaining != 9 || res[1][0].Remaining != 8 || res[2][0].Remaining != 5 {
		t.Fatalf("got %+v; each group must see what the groups before it recorded", res)
	}
	epoch, head, times := ring(t, c, stateKey(s, r, "k"))
	if len(times) != 5 || head != 0 || epoch != res[0][0].Stamp.Epoch || res[2][0].Stamp.Epoch != epoch {
		t.Fatalf("ring epoch %d, head %d, times %v; want 5 times, head 0, the epoch of the first take (%d) kept by the others", epoch, head, times, res[0][0].Stamp.Epoch)
	}
	for _, at := range times {
		if at != res[0][0].Stamp.At.UnixMicro() {
			t.Fatalf("times %v; one script call must see one instant, the stamp's %d", times, res[0][0].Stamp.At.UnixMicro())
		}
	}
}

// ring reads a sliding window's ring (see take.lua): its epoch, head and
// times in admission order.
func ring(t testing.TB, c rueidis.Client, key string) (epoch uint64, head int, times []int64) {
	t.Helper()
	v, err := c.Do(ctx(t), c.B().Get().Key(key).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return 0, 0, nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	le := func(b []byte) uint64 { // little-endian, any width
		var x uint64
		for i := len(b) - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		return x
	}
	// 6-byte entries, then a 34-byte header: epoch, head, count, first,
	// base, tfirst, newest. Entries, tfirst and newest are offsets from
	// base.
	const w, hdr = 6, 34
	if len(v) < hdr+w || (len(v)-hdr)%w != 0 {
		t.Fatalf("ring %s: %d bytes", key, len(v))
	}
	h := v[len(v)-hdr:]
	epoch, head = le(h[:6]), int(le(h[6:9]))
	count, first := int(le(h[9:12])), int(le(h[12:15]))
	base := int64(le(h[15:22]))
	tfirst, newest := base+int64(le(h[22:28])), base+int64(le(h[28:34]))
	if len(v) != hdr+w*count || head >= count || first > count {
		t.Fatalf("ring %s: %d bytes for %d entries, head %d, first %d", key, len(v), count, head, first)
	}
	for i := range count {
		off := w * ((head + i) % count)
		times = append(times, base+int64(le(v[off:off+w])))
	}
	if times[count-1] != newest || (first < count && times[first] != tfirst) {
		t.Fatalf("ring %s: times %v, first %d; header says tfirst %d, newest %d", key, times, first, tfirst, newest)
	}
	return epoch, head, times
}

// TestGroupsAreIndependent checks that a denied group of a batched call
// records nothing and does not stop the others.
func TestGroupsAreIndependent(t *testing.T) {
	s := newStore(t)
	for _, alg := range algorithms {
		ip := mustRule(t, "ip", 5, time.Minute, alg)
		acct := mustRule(t, "acct", 1, time.Minute, alg)
		a := floodgate.Hit{Rule: ip, Key: "1", Cost: 1}
		b := floodgate.Hit{Rule: acct, Key: "x", Cost: 1}
		res, err := runGroups(ctx(t), s, []group{
			{1, []floodgate.Hit{a, b}}, // allowed
			{2, []floodgate.Hit{a, b}}, // denied by acct: records nothing
			{3, []floodgate.Hit{a}},    // allowed
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0][0].Allowed || !res[0][1].Allowed || res[1][1].Allowed || !res[1][0].Allowed || !res[2][0].Allowed {
			t.Fatalf("%v: got %+v", alg, res)
		}
		if res[2][0].Remaining != 3 {
			t.Fatalf("%v: ip remaining after g1 and g3: %d, want 3; a denied group must record nothing", alg, res[2][0].Remaining)
		}
	}
}

func TestRefundIsIdempotent(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	for _, alg := range algorithms {
		r := mustRule(t, "refund", 4, time.Minute, alg)
		hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 2}}
		var first []floodgate.Result
		for range 2 {
			res, err := s.Take(ctx(t), hits)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = res
			}
		}
		for i := range 3 {
			if err := s.Refund(ctx(t), receipts(hits, first)); err != nil {
				t.Fatal(err)
			}
			res, err := s.Peek(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Remaining != 1 {
				t.Fatalf("%v: refund %d of the same take: Remaining %d after a peek of 1, want 1; Refund must credit once", alg, i+1, res[0].Remaining)
			}
		}
		if alg == floodgate.SlidingWindow {
			continue
		}
		tomb := s.tag("refund", "k") + "r:" + p(t, alg).suffix + ":" + takeID(first[0].Stamp.Take)
		if ttl, err := c.Do(ctx(t), c.B().Pttl().Key(tomb).Build()).AsInt64(); err != nil || ttl <= 0 {
			t.Fatalf("%v: tombstone %s PTTL %d, %v; want a positive TTL", alg, tomb, ttl, err)
		}
	}
}

func TestRefundScriptReportsChanges(t *testing.T) {
	s := newStore(t)
	r := mustRule(t, "rs", 4, time.Minute, floodgate.TokenBucket)
	hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}
	res, err := s.Take(ctx(t), hits)
	if err != nil {
		t.Fatal(err)
	}
	// A stamp of another state of the key (another epoch) changes nothing.
	other := receipts(hits, res)
	other[0].Stamp.Epoch++
	keys, args, err := s.refundCall(other)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.eval(ctx(t), refundScript, keys, args); err != nil || len(n) != 1 || n[0] != 0 {
		t.Fatalf("refund with another epoch: changed %d, %v; want 0", n, err)
	}
	keys, args, err = s.refundCall(receipts(hits, res))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1, 0, 0} {
		n, err := s.eval(ctx(t), refundScript, keys, args)
		if err != nil || len(n) != 1 || n[0] != want {
			t.Fatalf("refund %d: changed %d, %v; want %d", i+1, n, err, want)
		}
	}
}

func TestNoscriptFallback(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "noscript", 10, time.Minute, floodgate.SlidingWindow)
	hits := []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}
	for i := range 3 {
		if err := c.Do(ctx(t), c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		res, err := s.Take(ctx(t), hits)
		if err != nil {
			t.Fatalf("take after SCRIPT FLUSH: %v", err)
		}
		if res[0].Remaining != int64(9-i) {
			t.Fatalf("take %d after SCRIPT FLUSH: %+v; the fallback must run the script exactly once", i+1, res[0])
		}
		if err := c.Do(ctx(t), c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Peek(ctx(t), hits); err != nil {
			t.Fatalf("peek after SCRIPT FLUSH: %v", err)
		}
		if err := c.Do(ctx(t), c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.Refund(ctx(t), receipts(hits, nil)); err != nil {
			t.Fatalf("refund after SCRIPT FLUSH: %v", err)
		}
	}
}

// recorder is a client that records whether each script command may be
// retried by rueidis.
type recorder struct {
	rueidis.Client
	retryable map[string][]bool // by first word of the command
}

func (r *recorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	name := cmd.Commands()[0]
	r.retryable[name] = append(r.retryable[name], cmd.IsRetryable())
	return r.Client.Do(ctx, cmd)
}

// TestTakeIsNeverRetried checks the commands the scripts send: rueidis
// may retry a command marked retryable after a network error, which would
// record a take twice.
func TestTakeIsNeverRetried(t *testing.T) {
	rec := &recorder{Client: rawClient(t), retryable: map[string][]bool{}}
	s, err := New(ctx(t), Options{Client: rec, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hits := []floodgate.Hit{{Rule: mustRule(t, "retry", 10, time.Minute, floodgate.TokenBucket), Key: "k", Cost: 1}}
	res, err := s.Take(ctx(t), hits)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Refund(ctx(t), receipts(hits, res)); err != nil {
		t.Fatal(err)
	}
	// EVALSHA, NOSCRIPT, EVAL; again if another test's call (the packages'
	// tests share one Redis) loaded the script between the flush and the Take.
	for range 20 {
		if err := rec.Client.Do(ctx(t), rec.Client.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Take(ctx(t), hits); err != nil {
			t.Fatal(err)
		}
		if len(rec.retryable["EVAL"]) > 0 {
			break
		}
	}
	for _, name := range []string{"EVALSHA", "EVAL"} {
		if len(rec.retryable[name]) == 0 {
			t.Fatalf("no %s sent: %v", name, rec.retryable)
		}
		for _, r := range rec.retryable[name] {
			if r {
				t.Fatalf("%s sent as retryable: %v; a write script must never be retried blindly", name, rec.retryable)
			}
		}
	}
	rec.retryable = map[string][]bool{}
	if _, err := s.Peek(ctx(t), hits); err != nil {
		t.Fatal(err)
	}
	if r := rec.retryable["EVALSHA"]; len(r) != 1 || !r[0] {
		t.Fatalf("peek: %v; the read-only peek may be retried", rec.retryable)
	}
}

// TestBadStateIsAnError checks that state the store did not write (or a
// key of another type) yields an error, never a panic or a decision.
func TestBadStateIsAnError(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	for _, alg := range algorithms {
		r := mustRule(t, "bad", 10, time.Minute, alg)
		key := stateKey(s, r, "k")
		var cmd rueidis.Completed
		if alg == floodgate.SlidingWindow {
			cmd = c.B().Set().Key(key).Value("not a zset").Build()
		} else {
			cmd = c.B().Set().Key(key).Value("garbage").Build()
		}
		if err := c.Do(ctx(t), cmd).Error(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "redisstore: store unavailable: ") {
			t.Errorf("%v: take on a corrupt key: %v; want an error wrapping ErrStoreUnavailable", alg, err)
		}
	}
}

func TestInvalidHits(t *testing.T) {
	s := newStore(t)
	r := mustRule(t, "inv", 3, time.Minute, floodgate.SlidingWindow)
	for _, tc := range []struct {
		name string
		hits []floodgate.Hit
		want error
	}{
		{"no hits", nil, floodgate.ErrInvalidHit},
		{"cost above capacity", []floodgate.Hit{{Rule: r, Key: "k", Cost: 4}}, floodgate.ErrInvalidHit},
		{"negative cost", []floodgate.Hit{{Rule: r, Key: "k", Cost: -1}}, floodgate.ErrInvalidHit},
		{"same key twice", []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}, {Rule: r, Key: "k", Cost: 1}}, floodgate.ErrInvalidHit},
		{"window too long", []floodgate.Hit{{Rule: floodgate.Rule{Name: "long", Limit: 1, Window: 100 * 365 * 24 * time.Hour}, Key: "k"}}, floodgate.ErrInvalidRule},
		{"unknown algorithm", []floodgate.Hit{{Rule: floodgate.Rule{Name: "x", Limit: 1, Window: time.Second, Algorithm: 9}, Key: "k"}}, floodgate.ErrInvalidRule},
	} {
		if _, err := s.Take(ctx(t), tc.hits); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestClose(t *testing.T) {
	s := newStore(t)
	hits := []floodgate.Hit{{Rule: mustRule(t, "close", 3, time.Minute, floodgate.SlidingWindow), Key: "k", Cost: 1}}
	if _, err := s.Take(ctx(t), hits); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err1 := s.Take(ctx(t), hits)
	_, err2 := s.Peek(ctx(t), hits)
	err3 := s.Refund(ctx(t), receipts(hits, nil))
	err4 := s.Reset(ctx(t), hits[0].Rule, "k")
	err5 := s.Ping(ctx(t))
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if !errors.Is(err, floodgate.ErrClosed) {
			t.Errorf("call %d after Close: %v; want ErrClosed", i+1, err)
		}
	}
}

func TestCloseLeavesAGivenClientOpen(t *testing.T) {
	c := rawClient(t)
	s, err := New(ctx(t), Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := c.Do(ctx(t), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client after Close: %v; the store must not close a client it did not build", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	c := rawClient(t)
	for _, tc := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"url", Options{URL: "redis://127.0.0.1:6379/0"}, true},
		{"tls url", Options{URL: "rediss://user:pw@redis.example:6380"}, true},
		{"unix url", Options{URL: "unix:///run/redis.sock"}, true},
		{"sentinel url", Options{URL: "redis://192.0.2.1:26379?master_set=main&addr=192.0.2.2:26379"}, true},
		{"client", Options{Client: c, Prefix: "app:rl:"}, true},
		{"nothing", Options{}, false},
		{"both", Options{URL: "redis://127.0.0.1", Client: c}, false},
		{"bad scheme", Options{URL: "http://127.0.0.1"}, false},
		{"bad db", Options{URL: "redis://127.0.0.1/x"}, false},
		{"brace in prefix", Options{URL: "redis://127.0.0.1", Prefix: "a{b"}, false},
		{"long prefix", Options{URL: "redis://127.0.0.1", Prefix: strings.Repeat("p", maxPrefixLen+1)}, false},
		{"negative timeouts", Options{URL: "redis://127.0.0.1", callTimeout: -1, redialInterval: -1}, false},
	} {
		err := tc.opts.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if _, err := New(ctx(t), tc.opts); !tc.ok && !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", tc.name, err)
		}
	}
}

func TestPing(t *testing.T) {
	if err := newStore(t).Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestTimeIsTheServers checks the scores against the server's TIME.
func TestTimeIsTheServers(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "clock", 10, time.Minute, floodgate.SlidingWindow)
	before := serverTime(t, c)
	if _, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	after := serverTime(t, c)
	_, _, times := ring(t, c, stateKey(s, r, "k"))
	if len(times) != 1 || times[0] < before || times[0] > after {
		t.Fatalf("ring times %v; want one within the server's TIME %d..%d (µs)", times, before, after)
	}
}

func serverTime(t testing.TB, c rueidis.Client) int64 {
	t.Helper()
	v, err := c.Do(ctx(t), c.B().Time().Build()).AsIntSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	return v[0]*1e6 + v[1]
}

// receipts pairs hits with the stamps of res, a Take's results, or with
// no stamps when res is nil.
func receipts(hits []floodgate.Hit, res []floodgate.Result) []floodgate.Receipt {
	out := make([]floodgate.Receipt, len(hits))
	for i, h := range hits {
		out[i].Hit = h
		if res != nil {
			out[i].Stamp = res[i].Stamp
		}
	}
	return out
}

// stateKey is the key of the state of key under r.
func stateKey(s *Store, r floodgate.Rule, key string) string {
	return s.tag(r.Name, key) + stateSuffix(r)
}

// runGroups checks groups in one take script call, recording each group
// that is allowed, as a batch of the group commit does.
func runGroups(ctx context.Context, s *Store, groups []group) ([][]floodgate.Result, error) {
	var keys, args []string
	sizes := make([]int, len(groups))
	for i, g := range groups {
		var err error
		if keys, args, err = s.appendGroup(keys, args, "take", g); err != nil {
			return nil, err
		}
		sizes[i] = len(g.hits)
	}
	v, err := s.eval(ctx, takeScript, keys, args)
	if err != nil {
		return nil, err
	}
	return parseValues(v, sizes, true)
}

// ringLen is how many times a sliding window's ring holds (0 when the key
// does not exist): what it recorded and has not overwritten.
func ringLen(t testing.TB, c rueidis.Client, key string) int64 {
	t.Helper()
	_, _, times := ring(t, c, key)
	return int64(len(times))
}
