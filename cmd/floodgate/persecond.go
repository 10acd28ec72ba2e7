package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// openPerSecond connects to the Redis of REDIS_PERSECOND_URL, as the
// service connects to REDIS_URL's (in the background: it may be down at
// start), and returns the store that routes between it and other, and
// the per-second store, which the caller closes.
func openPerSecond(ctx context.Context, cfg serveConfig, other *redisstore.Store, logger *slog.Logger) (*perSecondStore, *redisstore.Store, error) {
	dialCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ps, err := redisstore.New(dialCtx, redisstore.Options{URL: cfg.PerSecondURL, Prefix: cfg.RedisPrefix,
		Breaker: breakerstore.Options{OnStateChange: func(from, to breakerstore.State) {
			logger.Warn("redis circuit breaker", "redis", "REDIS_PERSECOND_URL", "from", from.String(), "to", to.String())
		}}})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: REDIS_PERSECOND_URL: %s", errConfig, redisopt.Redact(err.Error(), cfg.PerSecondURL))
	}
	logger.Info("the limits of one second are kept in REDIS_PERSECOND_URL's Redis, the others in REDIS_URL's")
	return &perSecondStore{other: other, second: ps, rollbackTimeout: time.Second}, ps, nil
}

// perSecondStore keeps the limits whose window is one second (unit:
// second, or window: 1s) in one store and every other limit in another,
// as envoyproxy/ratelimit routes each descriptor's limit to its
// REDIS_PERSECOND_URL Redis by its unit. A check whose hits all live in
// one store is that store's, all-or-nothing and atomic. A check that
// mixes them is taken in the other store first, then in the per-second
// one, and the first is rolled back (refunded by its stamps) when the
// second denies or fails: nothing is recorded when the check is denied,
// and no key admits more than its limit. Between the two takes the
// first one's hits hold their quota, so a concurrent check of those keys
// may be denied where it would not be; and if the roll-back fails (the
// Redis lost in between), the hits stay recorded until they expire: a
// denial recorded as a hit, never an admission past a limit. Upstream
// does less: it increments both Redis in two pipelines and never takes
// anything back.
type perSecondStore struct {
	other, second floodgate.Store
	// rollbackTimeout bounds a roll-back, which runs even when the
	// check's own deadline has passed.
	rollbackTimeout time.Duration
	// second, if set, replaces isPerSecond: the tests route the
	// conformance suite's rules, few of which last a second, to both.
	route func(floodgate.Rule) bool
}

var _ floodgate.Store = (*perSecondStore)(nil)

// isPerSecond reports whether r's state is kept in the per-second store.
func isPerSecond(r floodgate.Rule) bool { return r.Window == time.Second }

// perSecond reports whether r's state is kept in the per-second store.
func (s *perSecondStore) perSecond(r floodgate.Rule) bool {
	if s.route != nil {
		return s.route(r)
	}
	return isPerSecond(r)
}

// split returns the positions of items in the other store and in the
// per-second one.
func split[T any](items []T, perSecond func(floodgate.Rule) bool, rule func(T) floodgate.Rule) (other, second []int) {
	for i, it := range items {
		if perSecond(rule(it)) {
			second = append(second, i)
		} else {
			other = append(other, i)
		}
	}
	return other, second
}

func hitRule(h floodgate.Hit) floodgate.Rule         { return h.Rule }
func receiptRule(r floodgate.Receipt) floodgate.Rule { return r.Hit.Rule }

// pick returns the items at the positions idx.
func pick[T any](items []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = items[i]
	}
	return out
}

// place puts each of part's results at its position in out.
func place[T any](out []T, idx []int, part []T) error {
	if len(part) != len(idx) {
		return errors.New("floodgate: a store answered a different number of results than hits")
	}
	for j, i := range idx {
		out[i] = part[j]
	}
	return nil
}

// admitted reports whether a store recorded a check's hits: each allowed,
// or Overdraw.
func admitted(hits []floodgate.Hit, res []floodgate.Result) bool {
	for i, r := range res {
		if !r.Allowed && !hits[i].Overdraw {
			return false
		}
	}
	return true
}

// Take implements floodgate.Store.
func (s *perSecondStore) Take(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	oi, si := split(hits, s.perSecond, hitRule)
	switch {
	case len(si) == 0:
		return s.other.Take(ctx, hits)
	case len(oi) == 0:
		return s.second.Take(ctx, hits)
	}
	oh, sh := pick(hits, oi), pick(hits, si)
	out := make([]floodgate.Result, len(hits))
	ores, err := s.other.Take(ctx, oh)
	if err == nil {
		err = place(out, oi, ores)
	}
	if err != nil {
		return nil, err
	}
	if !admitted(oh, ores) {
		// Nothing recorded: the per-second hits only peeked, for the
		// decision's figures.
		sres, err := s.second.Peek(ctx, sh)
		if err == nil {
			err = place(out, si, sres)
		}
		if err != nil {
			for _, i := range si {
				out[i] = floodgate.Result{Allowed: true} // no figures; the check is denied by the others
			}
		}
		return out, nil
	}
	sres, err := s.second.Take(ctx, sh)
	if err == nil {
		err = place(out, si, sres)
	}
	if err != nil || !admitted(sh, sres) {
		taken := make([]floodgate.Receipt, len(oh))
		for j, h := range oh {
			taken[j] = floodgate.Receipt{Hit: h, Stamp: ores[j].Stamp}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.rollbackTimeout)
		_ = s.other.Refund(rctx, taken) // failed: the hits expire by themselves (see the type)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Peek implements floodgate.Store.
func (s *perSecondStore) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	oi, si := split(hits, s.perSecond, hitRule)
	switch {
	case len(si) == 0:
		return s.other.Peek(ctx, hits)
	case len(oi) == 0:
		return s.second.Peek(ctx, hits)
	}
	out := make([]floodgate.Result, len(hits))
	for _, part := range []struct {
		st  floodgate.Store
		idx []int
	}{{s.other, oi}, {s.second, si}} {
		res, err := part.st.Peek(ctx, pick(hits, part.idx))
		if err == nil {
			err = place(out, part.idx, res)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Refund implements floodgate.Store: each receipt goes to the store of
// its hit's rule.
func (s *perSecondStore) Refund(ctx context.Context, receipts []floodgate.Receipt) error {
	oi, si := split(receipts, s.perSecond, receiptRule)
	var errs []error
	if len(oi) > 0 {
		errs = append(errs, s.other.Refund(ctx, pick(receipts, oi)))
	}
	if len(si) > 0 {
		errs = append(errs, s.second.Refund(ctx, pick(receipts, si)))
	}
	return errors.Join(errs...)
}

// Reset implements floodgate.Store.
func (s *perSecondStore) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if s.perSecond(rule) {
		return s.second.Reset(ctx, rule, key)
	}
	return s.other.Reset(ctx, rule, key)
}

// Renew implements floodgate.Store.
func (s *perSecondStore) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	oi, si := split(receipts, s.perSecond, receiptRule)
	out := make([]floodgate.Stamp, len(receipts))
	for _, part := range []struct {
		st  floodgate.Store
		idx []int
	}{{s.other, oi}, {s.second, si}} {
		if len(part.idx) == 0 {
			continue
		}
		st, err := part.st.Renew(ctx, pick(receipts, part.idx))
		if err == nil {
			err = place(out, part.idx, st)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// worstBreaker reports the worse state of two circuit breakers (open,
// then half-open, then closed), for floodgate_breaker_state: the alert on
// it fires when either Redis is lost.
type worstBreaker [2]interface{ State() gobreaker.State }

func (w worstBreaker) State() gobreaker.State { return max(w[0].State(), w[1].State()) }

// deref returns *p, or nil for a nil p.
func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}
