package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestOptionsBounds: each bound of Options on both of its sides, and
// Validate reports every problem, not the first.
func TestOptionsBounds(t *testing.T) {
	url := "redis://127.0.0.1"
	for _, tc := range []struct {
		name string
		opts Options
		errs int
	}{
		{"zero durations", Options{URL: url}, 0},
		{"prefix at the bound", Options{URL: url, Prefix: strings.Repeat("p", maxPrefixLen)}, 0},
		{"negative redial interval", Options{URL: url, redialInterval: -1}, 1},
		{"negative call timeout", Options{URL: url, callTimeout: -1}, 1},
		{"every problem", Options{Prefix: strings.Repeat("{", maxPrefixLen+1), redialInterval: -1, callTimeout: -1}, 5},
	} {
		err := tc.opts.Validate()
		n := 0
		if err != nil {
			n = strings.Count(err.Error(), "\n") + 1
		}
		if n != tc.errs || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: Validate() = %v; want %d problems", tc.name, err, tc.errs)
		}
	}
}

// TestCallTimeout: a call whose context has no deadline gets callTimeout,
// defaultCallTimeout when zero; a deadline of the caller's is kept.
func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		opt, want time.Duration
	}{
		{0, defaultCallTimeout},
		{time.Minute, time.Minute},
	} {
		s, err := New(context.Background(), Options{Conn: &faultConn{}, callTimeout: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := s.bound(context.Background())
		dl, ok := ctx.Deadline()
		cancel()
		if !ok || dl.Before(start.Add(tc.want)) || dl.After(time.Now().Add(tc.want)) {
			t.Errorf("callTimeout %v: deadline %v after the call, want %v", tc.opt, dl.Sub(start), tc.want)
		}
		mine, cancel := context.WithTimeout(context.Background(), time.Hour)
		ctx, cancel2 := s.bound(mine)
		if ctx != mine {
			t.Errorf("a context with a deadline was replaced")
		}
		cancel2()
		cancel()
		s.Close()
	}
}

// TestDialOptions: a store built from a URL dials with the URL's
// dial_timeout, else defaultDialTimeout, and
// with the URL's write_timeout, else defaultWriteTimeout.
func TestDialOptions(t *testing.T) {
	addr := "redis://" + redistest.Addr(t)
	for _, tc := range []struct {
		name         string
		opts         Options
		dial, writes time.Duration
	}{
		{"defaults", Options{URL: addr}, defaultDialTimeout, defaultWriteTimeout},
		{"the URL's", Options{URL: addr + "?dial_timeout=5s&write_timeout=7s"}, 5 * time.Second, 7 * time.Second},
	} {
		s, err := New(ctx(t), tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.dialed.opt; got.Dialer.Timeout != tc.dial || got.ConnWriteTimeout != tc.writes || !got.DisableCache {
			t.Errorf("%s: dial timeout %v, write timeout %v, cache disabled %v; want %v, %v, true", tc.name, got.Dialer.Timeout, got.ConnWriteTimeout, got.DisableCache, tc.dial, tc.writes)
		}
		s.Close()
	}
}

// TestResetOfAnUnknownAlgorithm is an error, not a panic.
func TestResetOfAnUnknownAlgorithm(t *testing.T) {
	s, err := New(context.Background(), Options{Conn: &faultConn{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := floodgate.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: floodgate.Algorithm(len(suffixes))}
	if err := s.Reset(context.Background(), r, "k"); !errors.Is(err, floodgate.ErrInvalidRule) {
		t.Fatalf("Reset under algorithm %d: %v; want ErrInvalidRule", len(suffixes), err)
	}
}
