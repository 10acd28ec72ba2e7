package redisstore

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/rueidis"
)

// keysOf returns every key that pattern matches on c, by SCAN.
func keysOf(t *testing.T, c rueidis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx(t), c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(keys)
	return keys
}

// TestStateKeysAreTheStores: StateKey names the key the store writes, for
// every algorithm and for a plain and a hashed key; ParseStateKey reads it
// back to the rule's identity and the stored key; StatePattern finds it
// and the keys of no other rule, window or prefix.
func TestStateKeysAreTheStores(t *testing.T) {
	s := newStore(t)
	other := newStore(t) // another prefix: never found
	raw := rawClient(t)
	l, err := floodgate.New(s, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"alice@example.com", "{evil}\n" + strings.Repeat("x", 100)}
	var written []string
	for _, alg := range algorithms {
		for _, window := range []time.Duration{time.Minute, time.Hour} {
			r := mustRule(t, "login", 10, window, alg)
			for _, key := range keys {
				d, err := l.Allow(ctx(t), r, key)
				if err != nil || !d.Allowed {
					t.Fatalf("%v %q: %+v, %v", r, key, d, err)
				}
				if _, err := other.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: key, Cost: 1}}); err != nil {
					t.Fatal(err)
				}
				k, err := rediskeys.StateKey(s.prefix, r, key)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := raw.Do(ctx(t), raw.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 1 {
					t.Errorf("%v %q: StateKey %q does not exist (%d, %v): it is not the store's key", r, key, k, n, err)
				}
				got, stored, ok := rediskeys.ParseStateKey(s.prefix, k)
				want := floodgate.Rule{Name: r.Name, Algorithm: r.Algorithm, Window: r.Window}
				if !ok || got != want || stored != keyenc.Encode(key) {
					t.Errorf("rediskeys.ParseStateKey(%q) = %v, %q, %v; want %v, %q", k, got, stored, ok, want, keyenc.Encode(key))
				}
				if window == time.Minute && alg == floodgate.SlidingWindow {
					written = append(written, k)
				}
			}
		}
	}
	// Tombstones and keys of another rule under the same prefix.
	d, err := l.Allow(ctx(t), mustRule(t, "login", 10, time.Minute, floodgate.TokenBucket), "bob")
	if err != nil || l.Refund(ctx(t), d) != nil {
		t.Fatal(d, err)
	}
	if _, err := l.Allow(ctx(t), mustRule(t, "pix", 10, time.Minute, floodgate.SlidingWindow), "alice@example.com"); err != nil {
		t.Fatal(err)
	}
	slices.Sort(written)
	if got := keysOf(t, raw, rediskeys.StatePattern(s.prefix, mustRule(t, "login", 99, time.Minute, floodgate.SlidingWindow))); !slices.Equal(got, written) {
		t.Errorf("StatePattern of login 1m sliding-window matches %q; want %q", got, written)
	}
	all := keysOf(t, raw, rediskeys.StatePattern(s.prefix, floodgate.Rule{Name: "login"}))
	states := 0
	for _, k := range all {
		r, _, ok := rediskeys.ParseStateKey(s.prefix, k)
		if ok {
			states++
		}
		if ok != !strings.Contains(k, "}:r:") || ok && r.Name != "login" {
			t.Errorf("rediskeys.ParseStateKey(%q) = %v, %v: a state key of login is ok, a tombstone is not", k, r, ok)
		}
	}
	// bob's bucket is full again after its refund: only its tombstone is left.
	if want := 2 * len(algorithms) * len(keys); states != want || len(all) == states {
		t.Errorf("StatePattern of login matches %d state keys of %d keys; want %d and a tombstone", states, len(all), want)
	}
	every := keysOf(t, raw, rediskeys.StatePattern(s.prefix, floodgate.Rule{}))
	if len(every) != len(all)+1 {
		t.Errorf("StatePattern of every rule matches %d keys; want login's %d and pix's", len(every), len(all))
	}
	if k, err := rediskeys.StateKey("", mustRule(t, "pix", 1, time.Minute, floodgate.TokenBucket), "acct-42"); err != nil || k != "fg:{pix:acct-42}:t:1m0s" {
		t.Errorf("StateKey under the default prefix = %q, %v", k, err)
	}
	if _, err := rediskeys.StateKey("", floodgate.Rule{Name: "pix", Algorithm: floodgate.TokenBucket, Window: time.Minute}, "k"); !errors.Is(err, floodgate.ErrInvalidRule) {
		t.Errorf("StateKey of a rule without a limit: %v; want ErrInvalidRule", err)
	}
}

func TestParseStateKeyRefusesOtherKeys(t *testing.T) {
	digest := keyenc.Encode("{x}")
	for _, k := range []string{
		"fg:{login:alice}:w:1m0s:extra",
		"fg:{login:alice}:r:w:1m0s:take-1", // a tombstone
		"fg:{login:alice}:s:1m0s",          // an earlier version's sliding window
		"fg:{login:alice}:w:60s",           // not as time.Duration writes it
		"fg:{login:alice}:w:-1m0s",
		"fg:{login:alice}:w",
		"fg:{login:}:w:1m0s",
		"fg:{login:a b}:w:1m0s", // not a key the store keeps
		"fg:{login:" + digest[:20] + "}:w:1m0s",
		"fg:{log in:alice}:w:1m0s",
		"fg:{login}:w:1m0s",
		"other:{login:alice}:w:1m0s",
		"fg:login:alice:w:1m0s",
	} {
		if r, stored, ok := rediskeys.ParseStateKey("", k); ok {
			t.Errorf("rediskeys.ParseStateKey(%q) = %v, %q, true; want not a state key", k, r, stored)
		}
	}
	if _, stored, ok := rediskeys.ParseStateKey("fg:", "fg:{login:"+digest+"}:w:1m0s"); !ok || stored != digest {
		t.Errorf("a hashed key: %q, %v", stored, ok)
	}
}

// TestPeekStoredIsPeek: peeking at the stored keys gives what Peek gives
// for the client's keys, hashed ones included, on a standalone server and
// on a Cluster (one call per slot).
func TestPeekStoredIsPeek(t *testing.T) {
	cluster := redistest.StartCluster(t, 1, 0)
	for name, url := range map[string]string{"standalone": "redis://" + redistest.Addr(t), "cluster": cluster.URL()} {
		t.Run(name, func(t *testing.T) {
			s := newStoreURL(t, url)
			var hits, stored []floodgate.Hit
			for i, alg := range algorithms {
				r := mustRule(t, "r", 3, time.Hour, alg)
				for j, key := range []string{"acct-1", "acct 2", "{acct-3}", strings.Repeat("k", 60), "never-taken"} {
					for range (i + j) % 4 {
						if _, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: key, Cost: 1}}); err != nil {
							t.Fatal(err)
						}
					}
					hits = append(hits, floodgate.Hit{Rule: r, Key: key, Cost: 1})
					stored = append(stored, floodgate.Hit{Rule: r, Key: keyenc.Encode(key), Cost: 1})
				}
			}
			want, err := s.Peek(ctx(t), hits)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.PeekStored(ctx(t), stored)
			if err != nil {
				t.Fatal(err)
			}
			denied := 0
			for i := range hits {
				w, g := want[i], got[i]
				// PeekStored ran after Peek: its waits are as long or shorter.
				if g.Allowed != w.Allowed || g.Remaining != w.Remaining || g.RetryAfter > w.RetryAfter || g.ResetAfter > w.ResetAfter ||
					w.RetryAfter-g.RetryAfter > time.Minute || w.ResetAfter-g.ResetAfter > time.Minute {
					t.Errorf("%v %q: PeekStored %+v, Peek %+v", hits[i].Rule, hits[i].Key, g, w)
				}
				if !w.Allowed {
					denied++
				}
			}
			if denied == 0 {
				t.Fatal("no key denied: the test proves nothing")
			}
			if _, err := s.PeekStored(ctx(t), []floodgate.Hit{{Rule: hits[0].Rule, Key: "{acct-3}", Cost: 1}}); !errors.Is(err, floodgate.ErrInvalidHit) {
				t.Errorf("PeekStored of a key no client key encodes to: %v; want ErrInvalidHit", err)
			}
		})
	}
}

// TestStatePatternEscapesThePrefix: a prefix may hold the bytes that a
// MATCH pattern treats specially, which must match only themselves.
func TestStatePatternEscapesThePrefix(t *testing.T) {
	r := mustRule(t, "r", 1, time.Minute, floodgate.SlidingWindow)
	for prefix, want := range map[string]string{
		"fg:":        "fg:{r:*}:w:1m0s",
		`a*b?c[d]e\`: `a\*b\?c\[d\]e\\{r:*}:w:1m0s`,
	} {
		if got := rediskeys.StatePattern(prefix, r); got != want {
			t.Errorf("rediskeys.StatePattern(%q) = %q, want %q", prefix, got, want)
		}
	}
}
