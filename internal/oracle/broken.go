package oracle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// broken is the Broken mode's escrow (see Broken): right in everything but
// where the store stamps a lease.
type broken struct {
	lim    *floodgate.Limiter
	period time.Duration
	units  int64
	mu     sync.Mutex
	leases map[string]*lease // by rule name; guarded by mu
}

// lease is one key's lease in hand: the take of its units, how many the
// replica handed out, and until when (monotonic clock, from before the
// take was sent).
type lease struct {
	mu    sync.Mutex
	d     floodgate.Decision // guarded by mu
	held  bool               // guarded by mu
	k     int64              // the units the lease took; guarded by mu
	used  int64              // guarded by mu
	until time.Time          // guarded by mu
}

func (b *broken) lease(rule floodgate.Rule) *lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.leases[rule.Name]
	if !ok {
		l = &lease{}
		b.leases[rule.Name] = l
	}
	return l
}

func (b *broken) allow(ctx context.Context, rule floodgate.Rule, key string) (bool, error) {
	l := b.lease(rule)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held && time.Now().Before(l.until) && l.used < l.k {
		l.used++
		return true, nil
	}
	if err := b.end(ctx, l); err != nil {
		return false, err
	}
	k := b.units
	if rule.Algorithm == floodgate.TokenBucket {
		// A fifth of the bucket: a lease that holds much of it wastes
		// what its holder leaves unused (a token bucket's refund credits
		// only what time has not yet paid), which would hide the bug.
		k = max(1, min(k, rule.Capacity()/5))
	}
	sent := time.Now()
	d, err := b.lim.Check(ctx, floodgate.Hit{Rule: rule, Key: key, Cost: k})
	if err != nil {
		return false, err
	}
	if d.Allowed {
		// The bug: the k units are stamped now, at the grant, though
		// the replica hands them out until the lease ends.
		l.d, l.held, l.k, l.used, l.until = d, true, k, 1, sent.Add(b.period)
		return true, nil
	}
	d, err = b.lim.Allow(ctx, rule, key)
	return d.Allowed, err
}

// end ends l's lease, if one is held, refunding its unused units.
func (b *broken) end(ctx context.Context, l *lease) error {
	if !l.held {
		return nil
	}
	l.held = false
	if l.used == l.k {
		return nil
	}
	_, err := b.lim.Settle(ctx, l.d, l.used)
	return err
}

// close refunds the unused units of every lease in hand.
func (b *broken) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, l := range b.leases {
		l.mu.Lock()
		errs = append(errs, b.end(context.Background(), l))
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}
