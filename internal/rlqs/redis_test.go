package rlqs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisLedgerOutage: a ledger dialled while Redis is down fails its
// grants at once and connects once Redis is back; a frozen Redis fails a
// grant within its context's deadline, with floodgate.ErrStoreUnavailable,
// and the grants succeed again once it answers.
func TestRedisLedgerOutage(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	l := DialRedisLedger(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true}, "outage:")
	defer l.Close()
	req := GrantRequest{Bucket: "b", Holder: "h", Capacity: 100, Demand: 40, TTL: time.Second}
	grant := func(d time.Duration) (Grant, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		g, err := l.Grant(ctx, req)
		return g, err, time.Since(start)
	}
	if _, err, took := grant(100 * time.Millisecond); !errors.Is(err, floodgate.ErrStoreUnavailable) || took > 50*time.Millisecond {
		t.Fatalf("with Redis down: %v after %v, want ErrStoreUnavailable at once", err, took)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var g Grant
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if g, err, _ = grant(time.Second); err == nil {
			break
		}
	}
	if err != nil || g != (Grant{Share: 40, Fair: 40}) {
		t.Fatalf("once Redis is up: %+v, %v; want a share of 40", g, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err, took := grant(100 * time.Millisecond)
	if cerr := srv.Cont(); cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || took > time.Second {
		t.Fatalf("with Redis frozen: %v after %v, want ErrStoreUnavailable within the deadline", err, took)
	}
	if g, err, _ = grant(2 * time.Second); err != nil || g.Share != 40 {
		t.Fatalf("after Redis answers again: %+v, %v", g, err)
	}
}
