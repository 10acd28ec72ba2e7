package memstore_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunFakeClock(t, func(t *testing.T, clock *storetest.FakeClock) floodgate.Store {
		s := memstore.New(memstore.Options{Now: clock.Now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) floodgate.Store {
		s := memstore.New(memstore.Options{})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExpiredEntriesAreCollected(t *testing.T) {
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now}, 0, time.Millisecond))
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	r, _ := floodgate.NewRule("sweep", 5, time.Second, floodgate.SlidingWindow)
	for i := range 100 {
		if _, err := l.Allow(context.Background(), r, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 100 {
		t.Fatalf("Len = %d after 100 keys, want 100", n)
	}
	clock.Advance(time.Second)
	for deadline := time.Now().Add(5 * time.Second); s.Len() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("Len = %d a window after the last request; the janitor must collect expired keys", s.Len())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDeniedProbesDoNotGrowTheMap(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	r, _ := floodgate.NewRule("probe", 1, time.Minute, floodgate.SlidingWindow)
	for i := range 100 {
		if _, err := l.Peek(context.Background(), floodgate.Hit{Rule: r, Key: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after only peeks, want 0", n)
	}
}

func TestClosedStoreFails(t *testing.T) {
	s := memstore.New(memstore.Options{})
	l, _ := floodgate.New(s, floodgate.Options{})
	r, _ := floodgate.NewRule("closed", 1, time.Minute, floodgate.SlidingWindow)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // twice is fine
	_, err := l.Allow(context.Background(), r, "k")
	if !errors.Is(err, floodgate.ErrClosed) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Allow after Close: %v; want ErrClosed and ErrStoreUnavailable", err)
	}
}

// TestAllowDoesNotAllocate: a decision of Allow, Check of one hit, or a
// Prepared rule's Allow, on a known key allocates nothing, allowed or
// denied, with or without the denial cache:
// the Limiter gives a LocalStore's takes no id and builds the Decision in
// place, and memstore finds the key without allocating.
func TestAllowDoesNotAllocate(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	for _, cache := range []int{0, 100} {
		l, err := floodgate.New(s, floodgate.Options{DenialCacheSize: cache})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
			r, err := floodgate.NewRule("alloc", 1_000_000, time.Millisecond, alg) // the most a sliding window allows
			if err != nil {
				t.Fatal(err)
			}
			hot, err := floodgate.NewRule("hot", 1, time.Hour, alg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, tc := range []struct {
				name string
				rule floodgate.Rule
			}{{"allowed", r}, {"denied", hot}} {
				l.Allow(ctx, tc.rule, "k")
				if n := testing.AllocsPerRun(1000, func() { l.Allow(ctx, tc.rule, "k") }); n != 0 {
					t.Errorf("%v, %s, denial cache %d: %v allocations per decision, want 0", alg, tc.name, cache, n)
				}
				if n := testing.AllocsPerRun(1000, func() { l.Check(ctx, floodgate.Hit{Rule: tc.rule, Key: "k", Cost: 1}) }); n != 0 {
					t.Errorf("%v, %s, denial cache %d: Check of one hit: %v allocations per decision, want 0", alg, tc.name, cache, n)
				}
				p, err := l.Prepare(tc.rule)
				if err != nil {
					t.Fatal(err)
				}
				if n := testing.AllocsPerRun(1000, func() { p.Allow(ctx, "k") }); n != 0 {
					t.Errorf("%v, %s, denial cache %d: Prepared.Allow: %v allocations per decision, want 0", alg, tc.name, cache, n)
				}
			}
		}
	}
}

// A flood of unique keys stops at MaxKeys: new keys fail with ErrFull,
// keys already held keep their limits, and expired keys make room again.
func TestMaxKeysBoundsMemory(t *testing.T) {
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now, MaxKeys: 100}, 4, 0))
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	r, _ := floodgate.NewRule("flood", 1, time.Minute, floodgate.SlidingWindow)
	ctx := context.Background()
	if d, _ := l.Allow(ctx, r, "victim"); !d.Allowed {
		t.Fatal("first request denied")
	}
	full := 0
	for i := range 1000 {
		if _, err := l.Allow(ctx, r, "bot-"+strconv.Itoa(i)); err != nil {
			if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("key %d: %v; want ErrFull wrapped in ErrStoreUnavailable", i, err)
			}
			full++
		}
	}
	if n := s.Len(); n > 100 || n+full != 1001 {
		t.Fatalf("Len %d, %d refused; want at most 100 keys held and each of the 1001 keys held or refused", n, full)
	}
	if d, err := l.Allow(ctx, r, "victim"); err != nil || d.Allowed {
		t.Fatalf("victim at the bound: %+v, %v; a limit in force must never be reset to make room", d, err)
	}
	clock.Advance(time.Minute + time.Second) // every key expires
	if d, err := l.Allow(ctx, r, "newcomer"); err != nil || !d.Allowed {
		t.Fatalf("after expiry: %+v, %v; expired keys must make room", d, err)
	}
}

// Peek and Refund never create a key: at the MaxKeys bound they neither
// fail nor take room, and a key they name stays absent.
func TestPeekAndRefundCreateNoKeys(t *testing.T) {
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Tuned(memstore.Options{Now: clock.Now, MaxKeys: 1}, 1, 0))
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		r, _ := floodgate.NewRule("bound", 3, time.Minute, alg)
		if err := s.Reset(ctx, r, "held"); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Allow(ctx, r, "held"); err != nil || !d.Allowed {
			t.Fatalf("%v: first key: %+v, %v", alg, d, err)
		}
		hits := []floodgate.Hit{{Rule: r, Key: "absent"}}
		d, err := l.Peek(ctx, hits...)
		if err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("%v: Peek of an absent key at the bound: %+v, %v; want a fresh key's answer (allowed, Remaining 2)", alg, d, err)
		}
		if err := s.Refund(ctx, receipts(hits)); err != nil {
			t.Fatalf("%v: Refund of an absent key at the bound: %v; want a no-op", alg, err)
		}
		if n := s.Len(); n != 1 {
			t.Fatalf("%v: Len %d after a peek and a refund of an absent key; want 1", alg, n)
		}
		if err := s.Reset(ctx, r, "held"); err != nil {
			t.Fatal(err)
		}
	}
}

// A token bucket's refund credits exactly what is left of the take's
// cost: what a bucket that never saw the take would hold.
func TestTokenBucketRefundCreditsWhatIsLeft(t *testing.T) {
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Options{Now: clock.Now})
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	ctx := context.Background()
	r, _ := floodgate.NewRule("left", 1, time.Second, floodgate.TokenBucket) // one token a second
	r.Burst = 2
	a, _ := l.Allow(ctx, r, "k")
	clock.Advance(400 * time.Millisecond)
	if b, _ := l.Allow(ctx, r, "k"); !a.Allowed || !b.Allowed {
		t.Fatalf("takes: %+v, %+v", a, b)
	}
	if err := l.Refund(ctx, a); err != nil { // 600ms of A's second is left
		t.Fatal(err)
	}
	// Without A, B at 400ms leaves one token: the bucket admits one more
	// now, and no second.
	if d, _ := l.Allow(ctx, r, "k"); !d.Allowed {
		t.Fatalf("after the refund: %+v; want allowed, as if A had never happened", d)
	}
	if d, _ := l.Allow(ctx, r, "k"); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("then: %+v; want denied for 1s, as if A had never happened", d)
	}
}

// receipts names hits as Refund receives them, with stamps no Take gave.
func receipts(hits []floodgate.Hit) []floodgate.Receipt {
	out := make([]floodgate.Receipt, len(hits))
	for i, h := range hits {
		out[i] = floodgate.Receipt{Hit: h, Stamp: floodgate.Stamp{At: time.Now(), Epoch: math.MaxUint64}}
	}
	return out
}

// TestRefundFindsTakesByStamp: memstore ignores ids and tells takes apart
// by Stamp.Take, so a receipt credits only if the state gave its Take, and
// only once; a second take of the same instant keeps its own credit.
func TestRefundFindsTakesByStamp(t *testing.T) {
	clock := storetest.NewFakeClock()
	s := memstore.New(memstore.Options{Now: clock.Now})
	defer s.Close()
	ctx := context.Background()
	r, _ := floodgate.NewRule("stamps", 3, time.Minute, floodgate.SlidingWindow)
	h := floodgate.Hit{Rule: r, Key: "k", Cost: 1}
	var stamps []floodgate.Stamp
	for range 2 { // two takes at one instant: the same At and Epoch
		res, err := s.Take(ctx, []floodgate.Hit{h})
		if err != nil || !res[0].Allowed {
			t.Fatalf("take: %+v, %v", res, err)
		}
		stamps = append(stamps, res[0].Stamp)
	}
	a, b := stamps[0], stamps[1]
	if a.Take != 1 || b.Take != 2 || a.At != b.At || a.Epoch != b.Epoch || a.Epoch == 0 {
		t.Fatalf("stamps %+v, %+v; want Takes 1 and 2 of one epoch, at one instant", a, b)
	}
	forged := func(take uint64) floodgate.Stamp { return floodgate.Stamp{At: a.At, Epoch: a.Epoch, Take: take} }
	for _, step := range []struct {
		name      string
		stamp     floodgate.Stamp
		remaining int64 // Peek's, after the refund
	}{
		{"a Take of zero, which no take gets", forged(0), 0},
		{"a Take the state never gave", forged(3), 0},
		{"a", a, 1},
		{"a again", a, 1},
		{"b, of the same instant as a", b, 2},
		{"b again", b, 2},
	} {
		if err := s.Refund(ctx, []floodgate.Receipt{{Hit: h, Stamp: step.stamp}}); err != nil {
			t.Fatalf("refund %s: %v", step.name, err)
		}
		res, err := s.Peek(ctx, []floodgate.Hit{h})
		if err != nil || res[0].Remaining != step.remaining {
			t.Fatalf("after refunding %s: Peek %+v, %v; want %d remaining", step.name, res, err, step.remaining)
		}
	}
}

// TestLongKeyDigestIsNotAKey: a key too long to keep is held as its
// digest, and a short key spelling that digest is another key.
func TestLongKeyDigestIsNotAKey(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	l, _ := floodgate.New(s, floodgate.Options{})
	ctx := context.Background()
	r, _ := floodgate.NewRule("digest", 1, time.Minute, floodgate.SlidingWindow)
	long := strings.Repeat("k", keyenc.MaxPlain+1)
	for _, key := range []string{keyenc.Encode(long), long, long + "x"} {
		if d, err := l.Allow(ctx, r, key); err != nil || !d.Allowed {
			t.Fatalf("first hit of %q: %+v, %v; want allowed, a key of its own", key, d, err)
		}
		if d, err := l.Allow(ctx, r, key); err != nil || d.Allowed {
			t.Fatalf("second hit of %q: %+v, %v; want denied", key, d, err)
		}
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("%d keys held, want 3", n)
	}
}

// TestRefundOnAnotherStoreCreditsNothing: a Decision refunded on a Limiter
// whose store did not take it (a second memstore, such as another
// Limiter's or a fallback's) must credit nothing there, whatever the
// algorithm: a receipt that the store's Take never gave credits nothing.
func TestRefundOnAnotherStoreCreditsNothing(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := storetest.NewFakeClock() // one clock: the same instants in both stores
			ctx := context.Background()
			r, err := floodgate.NewRule("other", 1, time.Minute, alg)
			if err != nil {
				t.Fatal(err)
			}
			limiter := func() *floodgate.Limiter {
				s := memstore.New(memstore.Options{Now: clock.Now})
				t.Cleanup(func() { s.Close() })
				l, err := floodgate.New(s, floodgate.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			a, b := limiter(), limiter()
			da, err := a.Allow(ctx, r, "k")
			if err != nil || !da.Allowed {
				t.Fatalf("take on a: %+v, %v", da, err)
			}
			if db, err := b.Allow(ctx, r, "k"); err != nil || !db.Allowed {
				t.Fatalf("take on b: %+v, %v", db, err)
			}
			if err := b.Refund(ctx, da); err != nil {
				t.Fatal(err)
			}
			if d, err := b.Allow(ctx, r, "k"); err != nil || d.Allowed {
				t.Fatalf("after refunding a's decision on b, b's next take: %+v, %v; want denied (b's key holds its own take, at the limit of 1)", d, err)
			}
		})
	}
}

// TestRefundOfAnotherKeysStampCreditsNothing: a receipt whose stamp a take
// of another key gave (a caller of Store.Refund that mixes up its
// receipts) credits nothing, whichever shards the two keys live in.
func TestRefundOfAnotherKeysStampCreditsNothing(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	r, _ := floodgate.NewRule("mixed", 1, time.Hour, floodgate.FixedWindow)
	const n = 64
	hits := make([]floodgate.Hit, n)
	stamps := make([]floodgate.Stamp, n)
	for i := range hits {
		hits[i] = floodgate.Hit{Rule: r, Key: "k" + strconv.Itoa(i), Cost: 1}
		res, err := s.Take(ctx, hits[i:i+1])
		if err != nil || !res[0].Allowed {
			t.Fatalf("take of %s: %+v, %v", hits[i].Key, res, err)
		}
		stamps[i] = res[0].Stamp
	}
	for i := range hits {
		for j := range stamps {
			if i == j {
				continue
			}
			if err := s.Refund(ctx, []floodgate.Receipt{{Hit: hits[i], Stamp: stamps[j]}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range hits {
		res, err := s.Peek(ctx, []floodgate.Hit{h})
		if err != nil || res[0].Allowed {
			t.Fatalf("%s, after refunds of the other keys' stamps: %+v, %v; want still denied (limit 1, one take held)", h.Key, res, err)
		}
	}
}

// TestKeyOfAReusedBufferIsCopied: a caller that reads its keys into a
// reused buffer (unsafe.String over a request's bytes) and overwrites the
// buffer after the call must not change the key memstore holds: the
// state stays the key's, and another key stays another's.
func TestKeyOfAReusedBufferIsCopied(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	r, _ := floodgate.NewRule("reused", 1, time.Hour, floodgate.SlidingWindow)
	buf := []byte("alice")
	take := func(key string) bool {
		t.Helper()
		res, err := s.Take(ctx, []floodgate.Hit{{Rule: r, Key: key, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Allowed
	}
	if !take(unsafe.String(&buf[0], len(buf))) {
		t.Fatal("first take of alice denied")
	}
	copy(buf, "mallo") // the buffer now spells another key
	if take("alice") {
		t.Error("alice's second take allowed: the state was lost when the caller's buffer changed (limit 1)")
	}
	if !take("mallo") {
		t.Error("mallo's first take denied: it found alice's state under the bytes the caller overwrote")
	}
}
