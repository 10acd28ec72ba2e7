package bank

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// countingStore counts the calls that reach its store: Redis calls, in
// production.
type countingStore struct {
	floodgate.Store
	takes atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	s.takes.Add(1)
	return s.Store.Take(ctx, hits)
}

// The service's limiter has the denial cache on by default: once a key is
// blocked, hammering it costs no store call until its Retry-After.
func TestHammeringABlockedKeyCostsNoStoreCall(t *testing.T) {
	cfg, err := ConfigFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DenialCacheSize <= 0 {
		t.Fatalf("DenialCacheSize %d by default, want the cache on", cfg.DenialCacheSize)
	}
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	store := &countingStore{Store: struct{ floodgate.Store }{ms}} // hides memstore's local fast path, as Redis has none
	l, err := newLimiter(store, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range cfg.LoginAccount.Limit {
		if d, err := l.Allow(ctx, cfg.LoginAccount, "account:a"); err != nil || !d.Allowed {
			t.Fatalf("within the limit: %v %v", d.Allowed, err)
		}
	}
	if d, _ := l.Allow(ctx, cfg.LoginAccount, "account:a"); d.Allowed {
		t.Fatal("over the limit: allowed")
	}
	before := store.takes.Load()
	for range 1000 {
		if d, _ := l.Allow(ctx, cfg.LoginAccount, "account:a"); d.Allowed {
			t.Fatal("a blocked key was allowed")
		}
	}
	if n := store.takes.Load() - before; n != 0 {
		t.Fatalf("1000 checks of a blocked key made %d store calls, want 0", n)
	}
}
