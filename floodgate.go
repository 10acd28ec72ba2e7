package floodgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/pace"
)

// defaultTimeout is the time budget of one decision when
// [Options.Timeout] is zero.
const defaultTimeout = 50 * time.Millisecond

// Options configures a [Limiter]. The zero value is ready to use.
type Options struct {
	// Timeout is the time budget of one call to the store. A store that
	// does not answer in time yields an error wrapping ErrStoreUnavailable
	// and context.DeadlineExceeded. Zero means 50 ms; negative
	// means no budget beyond the caller's context. A LocalStore (memstore)
	// gets no budget whatever Timeout says: it never waits on I/O, and a
	// budget's timer would cost its decisions their zero allocations.
	Timeout time.Duration
	// DenialCacheSize is how many denials the Limiter remembers locally,
	// so that a client hammering a blocked key costs no store call. Zero
	// (the default) disables the cache; negative is invalid.
	//
	// With the cache on, once the store denies a check, the same check
	// (the same hits, in the same order, with the same rules, keys and
	// costs) is denied locally until the shortest RetryAfter the store
	// computed for its denied hits: so a cached decision never reports a
	// hit denied whose own wait has run out (the store would report it
	// allowed). The cached decision's RetryAfter and ResetAfter count down
	// on the local monotonic clock from the moment the store call was
	// sent, so they never exceed what the store would answer; Remaining is
	// the store's figure at that moment. A Refund or Reset through this
	// Limiter clears the cached denials of the keys it touches, including
	// those of checks in flight. A Refund or Reset through another Limiter
	// (another replica) is seen here only once the cached denial expires:
	// at most its RetryAfter later. A Limiter whose store runs on an
	// injected clock (tests) should keep the cache off, since the cache
	// follows the real clock.
	//
	// The cache holds at most DenialCacheSize denials (about 300 bytes
	// each, plus the keys). When it is full, a new denial replaces an
	// expired one or, failing that, an arbitrary one: the newest denial is
	// always cached, and memory stays bounded.
	DenialCacheSize int
	// Overrides, when set, gives some keys of a rule a limit of their own
	// (see [Overrides]: package overrides keeps them in Redis, and
	// rlconfig.Rules reads live limits from envoy-format files; [Overlay]
	// stacks them). Nil means none, at no cost to a decision.
	Overrides Overrides
	// Logger receives the line about the first override the Limiter could
	// not use. Nil means slog.Default().
	Logger *slog.Logger
	// Escrow, when its Period is set, decides the single-hit checks of
	// hot keys from leases of their quota held in memory (see [Escrow]):
	// one store call per many decisions, never over a limit across
	// replicas. Off by default; a Limiter with escrow on must be closed
	// ([Limiter.Close]) to give its leases' unused units back.
	Escrow Escrow
}

// Limiter checks hits against a [Store]. It is safe for concurrent use; one
// Limiter per process, shared by all routes, is the common setup. Replicas
// that share a store (Redis) enforce their limits together.
//
// Most callers use [Limiter.Allow]; [Limiter.Check] checks several keys at
// once (login by IP and by account), all-or-nothing.
type Limiter struct {
	store     Store
	local     LocalStore // store, when it is local; nil otherwise
	timeout   time.Duration
	denials   *denialCache // nil when Options.DenialCacheSize is 0
	overrides Overrides    // nil when Options.Overrides is
	logger    *slog.Logger
	refused   atomic.Bool // an override was refused: logged once
	escrow    *escrow     // nil unless Options.Escrow.Period is set
	rules     validRules  // rules that decisions found valid
}

// New returns a limiter that keeps its state in store.
func New(store Store, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("floodgate: New: store is nil")
	}
	if opts.DenialCacheSize < 0 {
		return nil, fmt.Errorf("floodgate: New: denial cache size %d is negative", opts.DenialCacheSize)
	}
	if err := opts.Escrow.validate(); err != nil {
		return nil, fmt.Errorf("floodgate: New: %w", err)
	}
	l := &Limiter{store: store, timeout: opts.Timeout, overrides: opts.Overrides, logger: opts.Logger}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	l.local, _ = store.(LocalStore)
	if l.timeout == 0 {
		l.timeout = defaultTimeout
	}
	if opts.DenialCacheSize > 0 {
		l.denials = newDenialCache(opts.DenialCacheSize)
	}
	if opts.Escrow.Period != 0 {
		l.escrow = newEscrow(l, opts.Escrow)
	}
	return l, nil
}

// Close gives back the unused units of the leases in hand (escrow:
// [Options.Escrow]), in one store call, and stops the goroutine that
// gives back those of leases that end. Later decisions go to the store,
// one call each, as without escrow. A Limiter without escrow holds
// nothing: Close is then a no-op. It is safe to call more than once; on
// an error (the store is down) the units are lost until the store
// forgets them (see Escrow), never admitted twice.
func (l *Limiter) Close() error {
	if l.escrow == nil {
		return nil
	}
	return l.escrow.close()
}

// Allow checks one request of key under rule and records it if allowed.
func (l *Limiter) Allow(ctx context.Context, rule Rule, key string) (d Decision, err error) {
	h := Hit{Rule: rule, Key: key}
	err = l.one(ctx, &h, &d)
	return d, err
}

// Settle settles a cost taken as an estimate against the actual cost,
// known once the work is done (an LLM call's tokens, a query's rows, a
// download's bytes): take the estimate (a [Hit] whose Cost is the
// estimate), do the work, then
// Settle the decision (or one element of a check's Each) with the actual
// cost. An actual cost above the estimate is charged for the difference,
// past the limit if need be (an [Hit.Overdraw] hit): the key owes it. One
// below the estimate is refunded for the difference, as Refund credits
// (what the take still weighs; see Refund). Settle returns the charge's
// decision, or d when it charged nothing. A decision that recorded
// nothing settles nothing; a decision of several hits is refused (settle
// each element of its Each). Settle once: a later Refund of d credits
// nothing more after a refund in part.
func (l *Limiter) Settle(ctx context.Context, d Decision, actual int64) (Decision, error) {
	switch {
	case !d.ticket.taken:
		return d, nil
	case d.ticket.receipts != nil:
		return d, fmt.Errorf("%w: settle: a decision of %d hits; settle each element of its Each", ErrInvalidHit, len(d.ticket.receipts))
	case actual < 0:
		return d, fmt.Errorf("%w: settle: actual cost %d is negative", ErrInvalidHit, actual)
	}
	r := d.ticket.one
	switch est := r.Hit.Cost; {
	case actual > est:
		return l.Check(ctx, Hit{Rule: r.Hit.Rule, Key: r.Hit.Key, Cost: actual - est, Overdraw: true})
	case actual < est:
		part := d
		part.ticket.one.Hit.Cost = est - actual
		return d, l.Refund(ctx, part)
	}
	return d, nil
}

// one is Check of the single hit *h, which it resolves in place (see
// inForce), written into *d, which is zero and stays zero on an error.
// The hit and the decision stay on the caller's stack, and are copied only
// into the store's call and out to the caller (a Decision is 264 bytes on
// 64-bit platforms), so that with a LocalStore a decision allocates
// nothing.
func (l *Limiter) one(ctx context.Context, h *Hit, d *Decision) error {
	if err := l.inForce(h, 0); err != nil {
		return err
	}
	if l.local != nil && l.escrow == nil && l.denials == nil {
		// The path below without escrow and the denial cache, in a
		// function whose frame holds none of their temporaries.
		r, err := l.local.TakeOne(ctx, *h)
		if err != nil {
			return storeError("take", err)
		}
		d.decideOne(true, h, &r)
		return nil
	}
	return l.oneWith(ctx, h, d)
}

// oneWith is one with escrow, the denial cache, or a store that is not
// local.
func (l *Limiter) oneWith(ctx context.Context, h *Hit, d *Decision) error {
	if l.escrow != nil && !h.Overdraw && h.Rule.Algorithm != Concurrency {
		if ok, err := l.escrow.decide(ctx, h, d); ok {
			return err
		}
	}
	if l.local == nil {
		// A cached denial, without allocating; otherwise the general path
		// (which validates and probes again: a few nanoseconds next to a
		// remote store's call).
		if l.denials != nil {
			hs := [1]Hit{*h}
			if c, ok := l.denials.get(l.denials.probe(hs[:]), hs[:]); ok {
				*d = c
				return nil
			}
		}
		var err error
		*d, err = l.take(ctx, []Hit{*h})
		return err
	}
	var p probe
	if l.denials != nil {
		hs := [1]Hit{*h}
		p = l.denials.probe(hs[:])
		if c, ok := l.denials.get(p, hs[:]); ok {
			*d = c
			return nil
		}
	}
	sent := l.denials.clock()
	r, err := l.local.TakeOne(ctx, *h)
	if err != nil {
		return storeError("take", err)
	}
	d.decideOne(true, h, &r)
	if !d.Recorded && l.denials != nil {
		hs := [1]Hit{*h}
		l.denials.add(p, hs[:], *d, sent)
	}
	return nil
}

// Check checks every hit and records them all only if every one is within
// its limit: all-or-nothing. The decision describes the worst hit and lists
// each in Decision.Each.
func (l *Limiter) Check(ctx context.Context, hits ...Hit) (Decision, error) {
	if len(hits) == 1 { // the single hit's path, which allocates nothing
		h := hits[0]
		var d Decision
		err := l.one(ctx, &h, &d)
		return d, err
	}
	owned, err := l.own(hits) // a copy: the caller's hits do not escape
	if err != nil {
		return Decision{}, err
	}
	return l.take(ctx, owned)
}

// take checks hits, which are valid, normalized and the Limiter's own.
func (l *Limiter) take(ctx context.Context, hits []Hit) (Decision, error) {
	var p probe
	if l.denials != nil {
		p = l.denials.probe(hits)
		if d, ok := l.denials.get(p, hits); ok {
			return d, nil
		}
	}
	sent := l.denials.clock()
	ctx, cancel := l.budget(ctx)
	defer cancel()
	results, err := l.store.Take(ctx, hits)
	if err != nil {
		return Decision{}, storeError("take", err)
	}
	if len(results) != len(hits) {
		return Decision{}, storeError("take", fmt.Errorf("store returned %d results for %d hits", len(results), len(hits)))
	}
	if err := l.before(ctx, hits, results); err != nil {
		return Decision{}, err
	}
	d := decide(true, hits, results)
	if !d.Recorded && l.denials != nil {
		l.denials.add(p, hits, d, sent)
	}
	return d, nil
}

// before sets, in a check of several hits that records nothing (one that
// is not Overdraw was denied), the results of its Overdraw hits past their
// limits to what their keys had before the check, less their costs, which
// decide adds back. A store answers such a hit as its key stands with it
// recorded, and a key's state holds a debt of at most its capacity
// (Hit.Overdraw), so that answer plus the cost is what the key had only
// when the hit stays within the bound. before asks the store how those
// keys stand, a Peek of cost 1 each: one more call, on this rare path
// alone.
func (l *Limiter) before(ctx context.Context, hits []Hit, results []Result) error {
	denied := false // a hit that is not Overdraw was denied: nothing is recorded
	for i := range hits {
		denied = denied || !results[i].Allowed && !hits[i].Overdraw
	}
	if !denied {
		return nil
	}
	var probes []Hit
	var at []int
	for i := range hits {
		if !results[i].Allowed && hits[i].Overdraw {
			probes, at = append(probes, Hit{Rule: hits[i].Rule, Key: hits[i].Key, Cost: 1}), append(at, i)
		}
	}
	if len(probes) == 0 {
		return nil
	}
	rs, err := l.store.Peek(ctx, probes)
	if err != nil {
		return storeError("peek", err)
	}
	if len(rs) != len(probes) {
		return storeError("peek", fmt.Errorf("store returned %d results for %d hits", len(rs), len(probes)))
	}
	for j, i := range at {
		have := rs[j].Remaining // a Peek's: after a request of cost 1, if it fits
		if rs[j].Allowed {
			have++
		}
		results[i].Remaining = have - hits[i].cost()
	}
	return nil
}

// Peek reports what Check would decide now, recording nothing. Its
// Remaining is Check's: what the key would have left after the hits, so
// one less than it has left now, for a hit of cost 1.
func (l *Limiter) Peek(ctx context.Context, hits ...Hit) (Decision, error) {
	hits, err := l.own(hits)
	if err != nil {
		return Decision{}, err
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	results, err := l.store.Peek(ctx, hits)
	if err != nil {
		return Decision{}, storeError("peek", err)
	}
	if len(results) != len(hits) {
		return Decision{}, storeError("peek", fmt.Errorf("store returned %d results for %d hits", len(results), len(hits)))
	}
	if err := l.before(ctx, hits, results); err != nil {
		return Decision{}, err
	}
	return decide(false, hits, results), nil
}

// Refund undoes what a decision recorded, for example the account's
// login attempt once the password proved right, or a charge. Passing one
// element of Decision.Each undoes only that hit. Refund is idempotent, and
// a decision that recorded nothing (a denial, a Peek) is a no-op.
//
// A refund never lets a key admit more than its limit, so it credits only
// what the decision still weighs on the key: a sliding window's requests
// always; a fixed window's or sliding-window counter's only while the
// window the decision was taken in lasts; a token bucket's cost less the
// time since the decision; and nothing once the key was Reset since the
// decision (see [Store.Refund]). Refund promptly.
func (l *Limiter) Refund(ctx context.Context, d Decision) error {
	if !d.ticket.taken {
		return nil
	}
	if d.ticket.lease != nil {
		l.escrow.forget(d.ticket.one.Hit.Rule, d.ticket.one.Hit.Key, false)
		l.denials.clear(d.ticket.one.Hit.Rule, d.ticket.one.Hit.Key)
		return l.escrow.refund(ctx, &d)
	}
	receipts := d.ticket.receipts
	if receipts == nil {
		receipts = []Receipt{d.ticket.one}
	}
	if l.escrow != nil && len(receipts) == 1 {
		l.escrow.forget(receipts[0].Hit.Rule, receipts[0].Hit.Key, false)
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	err := l.store.Refund(ctx, receipts)
	// Cleared even when the store failed: the refund may have been made.
	for _, r := range receipts {
		l.denials.clear(r.Hit.Rule, r.Hit.Key)
	}
	if err != nil {
		return storeError("refund", err)
	}
	return nil
}

// Reset forgets everything recorded for key under rule: an administrator's
// unlock. With [Options.Overrides], it forgets the state of the rule in
// force for key: the override's, if key has one.
func (l *Limiter) Reset(ctx context.Context, rule Rule, key string) error {
	hits, err := l.own([]Hit{{Rule: rule, Key: key}})
	if err != nil {
		return err
	}
	rule = hits[0].Rule
	ctx, cancel := l.budget(ctx)
	defer cancel()
	err = l.store.Reset(ctx, rule, key)
	l.denials.clear(rule, key)
	if l.escrow != nil {
		l.escrow.forget(rule, key, true)
	}
	if err != nil {
		return storeError("reset", err)
	}
	return nil
}

// Wait is Check that slows down before it rejects: while the hits are
// denied with a RetryAfter that fits in what is left of maxDelay, it waits
// that long and checks again. Its waits add up to at most maxDelay (the
// first may take all of it), and end by ctx's deadline. It returns the
// first allowed decision, a denial it cannot wait for (at once: like
// x/time/rate's WaitN, it does not wait for what it cannot get), or ctx's
// error as soon as ctx is done.
func (l *Limiter) Wait(ctx context.Context, maxDelay time.Duration, hits ...Hit) (Decision, error) {
	d, err := l.Check(ctx, hits...)
	werr := pace.Loop(ctx, maxDelay, func(left time.Duration) (time.Duration, <-chan struct{}, bool) {
		return d.RetryAfter, nil, err == nil && !d.Allowed && d.RetryAfter <= left
	}, func() { d, err = l.Check(ctx, hits...) })
	if werr != nil {
		return d, fmt.Errorf("floodgate: wait: %w", werr)
	}
	return d, err
}

// budget gives ctx the Limiter's time budget, except for a LocalStore,
// which promises never to wait on I/O (see LocalStore): it would answer
// within its budget anyway, and the budget's timer would cost the
// single-hit path its zero allocations.
func (l *Limiter) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout < 0 || l.local != nil {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= l.timeout {
		return ctx, func() {} // the caller's is as tight: spare a timer
	}
	return context.WithTimeout(ctx, l.timeout)
}

func storeError(op string, err error) error {
	if errors.Is(err, ErrStoreUnavailable) {
		return fmt.Errorf("floodgate: %s: %w", op, err)
	}
	return fmt.Errorf("floodgate: %s: %w: %w", op, ErrStoreUnavailable, err)
}

// own returns a copy of hits, each under the rule in force for its key
// (see inForce) and validated against it, which the Limiter may keep: a
// caller may reuse its slice.
func (l *Limiter) own(hits []Hit) ([]Hit, error) {
	if len(hits) == 0 {
		return nil, fmt.Errorf("%w: no hits to check", ErrInvalidHit)
	}
	out := make([]Hit, len(hits))
	var errs []error
	for i, h := range hits {
		for j := range i {
			if hits[j].Rule.Name == h.Rule.Name && hits[j].Key == h.Key {
				errs = append(errs, fmt.Errorf("%w: hits %d and %d both name key %q under rule %s; use one hit with Cost", ErrInvalidHit, j, i, truncate(h.Key), h.Rule.Name))
			}
		}
		out[i] = h
		if err := l.inForce(&out[i], i); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// InForce returns h under the rule in force for its key (its override,
// under h's rule name, when [Options.Overrides] has a usable one; h's own
// rule otherwise), with its cost normalized (zero means 1), and h's
// problems under that rule: an error wrapping [ErrInvalidHit] or
// [ErrInvalidRule], such as a cost above the capacity of the rule in
// force. The hit is
// returned under the rule in force even then, so that a caller can report
// the limit that refused it. Check, Peek, Allow and Reset resolve their
// hits this way; a caller resolves ahead only to report, or to treat a
// cost beyond every admission as a denial (enforce.Gate.Check does both,
// for each hit's verdict). A hit that InForce returned is checked under
// the rule it carries, without looking the overrides up again: what the
// caller reports from it is what the check enforces, even when the
// overrides change in between. Hand it to the Limiter that resolved it,
// with its Rule and Key as returned: a copy whose key was changed keeps
// the mark, and would be checked under the old key's rule.
func (l *Limiter) InForce(h Hit) (Hit, error) {
	err := l.inForce(&h, 0)
	h.inForce = true
	return h, err
}

// inForce is InForce of hit number i, done in place on *h. The valid case
// without an override allocates nothing.
func (l *Limiter) inForce(h *Hit, i int) error {
	valid := l.rules.valid(&h.Rule)
	lookup := l.overrides != nil && !h.inForce
	if valid && !lookup && uint64(h.Cost) <= 1 && h.Key != "" && len(h.Key) <= bounds.KeyLen && h.Lease == 0 && !(h.Overdraw && h.Rule.Algorithm == Concurrency) {
		h.Cost = 1 // the usual hit, which validate would pass: spare its call
		return nil
	}
	if lookup && valid {
		if r, ok := l.override(h.Rule, h.Key); ok && r != h.Rule {
			base := h.Rule
			h.Rule = r
			err := h.validate(i, h.Rule.valid())
			h.Cost = h.cost()
			if err != nil {
				return fmt.Errorf("override of %s for key %q: %w", base, truncate(h.Key), err)
			}
			return nil
		}
	}
	err := h.validate(i, valid)
	h.Cost = h.cost() // stores see costs of 1 to capacity
	return err
}

// validRules remembers a few rules found valid, so that a decision under
// one of them compares it (a few instructions) where validating it costs
// a memory store's decision a tenth of its instructions. Each slot is
// filled once, by the first valid rule whose slotOf it is, and kept: at
// most len(slots) allocations in a Limiter's life, none per decision, and
// a rule whose slot holds another is validated each time, as before.
type validRules struct {
	slots [8]atomic.Pointer[Rule]
}

// valid reports r.valid(), from memory when r is the rule of its slot.
func (v *validRules) valid(r *Rule) bool {
	slot := &v.slots[slotOf(r)]
	if p := slot.Load(); p != nil && p.Limit == r.Limit && p.Window == r.Window && p.Algorithm == r.Algorithm && p.Burst == r.Burst && p.Name == r.Name {
		return true
	}
	if !r.valid() {
		return false
	}
	if slot.Load() == nil {
		kept := *r
		slot.CompareAndSwap(nil, &kept)
	}
	return true
}

// slotOf is the slot of validRules for r: a mix of its limit, window and
// name's length.
func slotOf(r *Rule) int {
	h := (uint64(r.Limit) ^ uint64(r.Window)<<7 ^ uint64(len(r.Name))<<3) * 0x9e3779b97f4a7c15
	return int(h >> 61)
}

// override returns the rule that Options.Overrides gives key in place of
// base, under base's name (a key's state belongs to its rule's name), and
// whether it gives one. A rule it cannot use, invalid or the panic of a
// buggy Overrides that a key trips, is no override: base applies and the
// first such refusal is logged. An override only ever changes a limit: an
// operator's mistake must neither switch the limit off nor fail the
// requests it limits (which Envoy, on an error, lets through).
func (l *Limiter) override(base Rule, key string) (r Rule, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			l.refuse(base, fmt.Errorf("the overrides panicked: %v", p))
			r, ok = base, false
		}
	}()
	if r, ok = l.overrides.Override(base, key); !ok {
		return base, false
	}
	r.Name = base.Name
	if err := r.Validate(); err != nil {
		l.refuse(base, err)
		return base, false
	}
	if (r.Algorithm == Concurrency) != (base.Algorithm == Concurrency) {
		// A rate's hit is never released, a lease is: neither may stand
		// for the other.
		l.refuse(base, fmt.Errorf("%w: rule %q: an override may not turn a rate into a limit on requests in flight, or back (%v for %v)", ErrInvalidRule, base.Name, r.Algorithm, base.Algorithm))
		return base, false
	}
	return r, true
}

// refuse logs the first override the Limiter could not use.
func (l *Limiter) refuse(base Rule, err error) {
	if !l.refused.Swap(true) {
		l.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: an override could not be used; the rule's own limit applies. Logged once",
			slog.String("rule", base.Name), slog.Any("error", err))
	}
}

// validate checks hit number i on its own; valid is h.Rule.valid(),
// which the caller may know already. The valid case allocates nothing.
func (h *Hit) validate(i int, valid bool) error {
	// A cost of 0 or 1 (the usual one) is within every valid rule's
	// maxCost, which is at least 1.
	if valid && h.Key != "" && len(h.Key) <= bounds.KeyLen && (uint64(h.Cost) <= 1 || h.Cost > 0 && h.Cost <= h.maxCost()) && !(h.Overdraw && h.Rule.Algorithm == Concurrency) && h.Lease == 0 {
		return nil
	}
	if !valid {
		return fmt.Errorf("hit %d: %w", i, h.Rule.problems())
	}
	var errs []error
	switch {
	case h.Key == "":
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): key is empty", ErrInvalidHit, i, h.Rule.Name))
	case len(h.Key) > bounds.KeyLen:
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): key is %d bytes, at most %d allowed", ErrInvalidHit, i, h.Rule.Name, len(h.Key), bounds.KeyLen))
	}
	switch c := h.cost(); {
	case c < 1:
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d is below 1", ErrInvalidHit, i, h.Rule.Name, h.Cost))
	case !h.Overdraw && c > h.Rule.Capacity():
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d exceeds the rule's capacity %d, so it could never be allowed", ErrInvalidHit, i, h.Rule.Name, c, h.Rule.Capacity()))
	case h.Rule.Algorithm == Concurrency && h.Overdraw:
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): a concurrency hit cannot be Overdraw: a lease is within its limit or not taken", ErrInvalidHit, i, h.Rule.Name))
	case h.Rule.Algorithm.logged() && c > bounds.SlidingCost:
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d is above %d, the most a sliding-window log records in one hit; use token-bucket or sliding-window-counter for large costs", ErrInvalidHit, i, h.Rule.Name, c, bounds.SlidingCost))
	case h.Overdraw && c > bounds.Limit:
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): cost %d of an overdraw hit is above %d", ErrInvalidHit, i, h.Rule.Name, c, int64(bounds.Limit)))
	}
	if h.Lease != 0 {
		errs = append(errs, fmt.Errorf("%w: hit %d (%s): Lease is set; leases are the Limiter's own (Options.Escrow)", ErrInvalidHit, i, h.Rule.Name))
	}
	return errors.Join(errs...)
}

// maxCost is the highest cost h may have (see Hit.Cost and
// Hit.Overdraw): bounds.MaxCost of its rule.
func (h Hit) maxCost() int64 {
	return bounds.MaxCost(h.Rule.Capacity(), h.Rule.Algorithm.logged(), h.Overdraw)
}

// truncate shortens a key for an error message.
func truncate(key string) string {
	if len(key) > 32 {
		return key[:32] + "..."
	}
	return key
}
