package floodgate

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// Prepared is a rule prepared for one [Limiter] by [Limiter.Prepare]:
// validated once, so that its decisions skip the checks that
// [Limiter.Allow] makes of its rule argument on every call. A Prepared
// decides exactly as Allow of its rule does (overrides, escrow and the
// denial cache included). It is safe for concurrent use; prepare each
// rule once, when the routes are set up, and keep it.
type Prepared struct {
	l    *Limiter
	rule Rule
	// take is TakeOne of a hit of cost 1 under rule, as a function of
	// its key (the store's TakeFunc, or a call of TakeOne), when the
	// Limiter's store is a LocalStore and none of overrides, escrow and
	// the denial cache is on: a decision is then one call of take. Nil
	// otherwise.
	take func(ctx context.Context, key string) (Result, error)
}

// ruleTaker is a LocalStore with TakeFunc (see LocalStore).
type ruleTaker interface {
	TakeFunc(Rule) func(ctx context.Context, key string) (Result, error)
}

// Prepare validates rule and returns it prepared for l. An invalid rule
// is an error wrapping [ErrInvalidRule].
func (l *Limiter) Prepare(rule Rule) (*Prepared, error) {
	if err := rule.Validate(); err != nil {
		return nil, fmt.Errorf("floodgate: prepare: %w", err)
	}
	p := &Prepared{l: l, rule: rule}
	if l.local == nil || l.overrides != nil || l.escrow != nil || l.denials != nil {
		return p, nil
	}
	if t, ok := l.local.(ruleTaker); ok {
		p.take = t.TakeFunc(rule)
	} else {
		p.take = func(ctx context.Context, key string) (Result, error) {
			return l.local.TakeOne(ctx, Hit{Rule: rule, Key: key, Cost: 1})
		}
	}
	return p, nil
}

// Allow is [Limiter.Allow] of p's rule: it checks one request of key and
// records it if allowed.
func (p *Prepared) Allow(ctx context.Context, key string) (d Decision, err error) {
	err = p.allow(ctx, key, &d)
	return d, err
}

// allow is Allow into *d, which is zero (Allow inlines: d stays on its
// caller's stack).
func (p *Prepared) allow(ctx context.Context, key string, d *Decision) error {
	if p.take != nil && key != "" && len(key) <= bounds.KeyLen {
		r, err := p.take(ctx, key)
		if err != nil {
			return storeError("take", err)
		}
		d.figures(&p.rule, &r)
		if r.Allowed {
			d.Recorded = true
			d.ticket.taken = true
			// Field by field: a Hit literal is zeroed and copied whole,
			// and a Stamp is copied in 16-byte loads, which cannot be
			// forwarded from the take's 8-byte writes and wait for them.
			d.ticket.one.Hit.Rule, d.ticket.one.Hit.Key, d.ticket.one.Hit.Cost = p.rule, key, 1
			st := &d.ticket.one.Stamp
			st.At, st.Epoch, st.Take = r.Stamp.At, r.Stamp.Epoch, r.Stamp.Take
		}
		return nil
	}
	h := Hit{Rule: p.rule, Key: key}
	return p.l.one(ctx, &h, d)
}
