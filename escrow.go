package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/keyenc"
)

// Escrow configures leases of quota ([Options.Escrow]): a Limiter that
// sees a key hit often takes k units of its quota from the store in one
// call, decides up to k hits from memory until the lease ends, Period
// later, and gives back what it did not use. The zero value turns escrow
// off. The package documentation's section "Escrow" gives the model and
// why it never admits more than a limit across replicas.
//
// For example, with Period 100 ms, a Limiter that sees 5,000 hits a
// second of one key takes leases of about 500 units: one store call per
// 500 decisions in place of 500, and a cold key (a hit now and then)
// still costs one call, a plain take, with today's figures.
type Escrow struct {
	// Period is the lease period δ: 50 ms to 1 s; zero turns escrow off.
	// A longer period spares more store calls, and holds unused units
	// longer out of the other replicas' reach (they go back when the
	// lease ends); a Reset, an override or a changed limit reaches every
	// replica within one Period.
	Period time.Duration
	// Keys bounds the keys whose rates and leases the Limiter tracks:
	// zero means 4,096 (about 1 MB), negative is invalid. A key that
	// finds its slot held by another key's lease is decided by the store,
	// one call a hit, as without escrow.
	Keys int
}

const (
	minEscrowPeriod   = 50 * time.Millisecond
	maxEscrowPeriod   = time.Second
	defaultEscrowKeys = 4096
	// escrowShare is the most of a key's remaining quota (as the store
	// last reported it) that one lease takes: 1/escrowShare.
	escrowShare = 4
)

func (o Escrow) validate() error {
	var errs []error
	if o.Period != 0 && (o.Period < minEscrowPeriod || o.Period > maxEscrowPeriod || o.Period%time.Microsecond != 0) {
		errs = append(errs, fmt.Errorf("escrow period %v is not a whole number of microseconds within %v to %v", o.Period, minEscrowPeriod, maxEscrowPeriod))
	}
	if o.Keys < 0 {
		errs = append(errs, fmt.Errorf("escrow keys %d is negative", o.Keys))
	}
	return errors.Join(errs...)
}

// escrow is a Limiter's leases: a table of keys, direct-mapped by their
// identity, each with its rate and the lease in hand, and a goroutine
// that gives back the unused units of leases that ended.
type escrow struct {
	l      *Limiter
	period time.Duration
	seed   maphash.Seed
	base   time.Time // the monotonic clock's origin: mono is time since
	slots  []keyEscrow
	mask   uint64

	// mu guards held, and is taken before a key's (keyEscrow.mu), never
	// after.
	mu     sync.Mutex
	held   map[*grant]struct{} // guarded by mu: leases whose units may still go back
	closed atomic.Bool         // Close ran: no more leases
	stop   chan struct{}
	done   chan struct{}
}

// keyEscrow is one slot of the table: a key's identity, rate and lease.
type keyEscrow struct {
	mu sync.Mutex
	// The identity (Store): rule name, algorithm, window and key; set
	// when the slot is in use.
	inUse  bool
	name   string
	alg    Algorithm
	window time.Duration
	key    string
	// seen counts the hits since the last store call, at last (mono).
	seen, last int64
	// sight is the identity hash of the last key seen here untracked, at
	// sightAt (mono): a second hit within a period tracks it.
	sight   uint64
	sightAt int64
	// rem is what the key had left after the last store call, as the
	// store reported it (-1: not known yet, when the rule's capacity
	// stands for it).
	rem int64
	// g is the lease in hand, nil if none.
	g *grant
	// wait is non-nil while a store call of the key is in flight, and
	// closed when it ends: the other hits wait for it.
	wait chan struct{}
	// A denial held: hits of cost at least denyCost under denyRule are
	// denied from memory until denyUntil (mono), with the figures of
	// deny, answered at denySent (sent) and denyRecv (received).
	denyUntil, denySent, denyRecv, denyCost int64
	denyRule                                Rule
	deny                                    Result
	_                                       [24]byte
}

// grant is a lease: k units of a key taken by one store call.
type grant struct {
	ks    *keyEscrow
	hit   Hit // the lease's hit: Cost k, Lease the period
	stamp Stamp
	res   Result // the store's answer
	// Guarded by ks.mu:
	used     int64               // units decided from the lease, net of refunds
	end      int64               // mono: when the lease ends here (from before the call was sent)
	recv     int64               // mono: when the answer came
	returned bool                // its unused units went back (or were dropped): it decides nothing more
	serial   uint64              // the hits decided from it
	refunded map[uint64]struct{} // the hits refunded to it, by serial
}

func newEscrow(l *Limiter, o Escrow) *escrow {
	n := 1
	for n < cmpOr(o.Keys, defaultEscrowKeys) {
		n <<= 1
	}
	e := &escrow{
		l: l, period: o.Period, seed: maphash.MakeSeed(), base: time.Now(),
		slots: make([]keyEscrow, n), mask: uint64(n - 1),
		held: make(map[*grant]struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go e.sweeper()
	return e
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func (e *escrow) mono() int64 { return int64(time.Since(e.base)) }

func (e *escrow) slot(r *Rule, key string) *keyEscrow {
	return &e.slots[keyenc.Identity(e.seed, r.Name, uint8(r.Algorithm), r.Window, key)&e.mask]
}

// claim gives the slot to the key of h, with no history. ks.mu must be
// held.
func (ks *keyEscrow) claim(h *Hit) {
	ks.inUse, ks.name, ks.alg, ks.window, ks.key = true, h.Rule.Name, h.Rule.Algorithm, h.Rule.Window, strings.Clone(h.Key)
	ks.seen, ks.last, ks.rem, ks.g, ks.wait = 0, 0, -1, nil, nil
	ks.denyUntil, ks.denySent, ks.denyRecv, ks.denyCost, ks.denyRule, ks.deny = 0, 0, 0, 0, Rule{}, Result{}
}

func (ks *keyEscrow) is(r *Rule, key string) bool {
	return ks.inUse && ks.name == r.Name && ks.alg == r.Algorithm && ks.window == r.Window && ks.key == key
}

// decide decides the hit *h (valid, in force, not Overdraw, not of a
// Concurrency rule) into *d, from the key's lease or held denial, or with
// one store call; ok is false when the key is not tracked (its slot is
// another key's), and the caller decides it as without escrow.
func (e *escrow) decide(ctx context.Context, h *Hit, d *Decision) (ok bool, err error) {
	id := keyenc.Identity(e.seed, h.Rule.Name, uint8(h.Rule.Algorithm), h.Rule.Window, h.Key)
	ks := &e.slots[id&e.mask]
	ks.mu.Lock()
	if !ks.is(&h.Rule, h.Key) {
		now := e.mono()
		if ks.inUse && (ks.wait != nil || ks.g != nil && !ks.g.returned && now < ks.g.end) {
			ks.mu.Unlock()
			return false, nil // the slot is another key's, which holds a lease
		}
		if ks.sight != id || now-ks.sightAt > int64(e.period) {
			// A key not seen in the last period: decided as without
			// escrow, and remembered by its hash alone, so that a cold
			// key costs no more than that.
			ks.sight, ks.sightAt = id, now
			ks.mu.Unlock()
			return false, nil
		}
		// Its second hit within a period: the key is tracked, from the
		// first.
		ks.claim(h)
		ks.seen, ks.last = 1, ks.sightAt
	}
	ks.seen++
	c := h.Cost
	for {
		now := e.mono()
		if g := ks.g; g != nil && !g.returned {
			if g.hit.Rule != h.Rule {
				// The rule in force changed (an override, a new limit):
				// the lease decides nothing more, and its unused units go
				// back at the sweeper's next round.
				g.end = min(g.end, now)
			} else if now < g.end && g.hit.Cost-g.used >= c {
				g.used += c
				g.serial++
				g.decision(h, d, now)
				ks.mu.Unlock()
				return true, nil
			}
		}
		if now < ks.denyUntil && c >= ks.denyCost && ks.denyRule == h.Rule {
			ks.denial(h, d, now)
			ks.mu.Unlock()
			return true, nil
		}
		if w := ks.wait; w != nil {
			ks.mu.Unlock()
			select {
			case <-w:
			case <-ctx.Done():
				return true, storeError("take", ctx.Err())
			}
			ks.mu.Lock()
			if !ks.is(&h.Rule, h.Key) { // the slot changed hands meanwhile
				ks.mu.Unlock()
				return false, nil
			}
			continue
		}
		return true, e.fetch(ctx, ks, h, d, now)
	}
}

// fetch makes the store call of the key of ks for the hit h, with ks.mu
// held, which it releases: a lease of k units, or a plain take of h for a
// cold key, k = cost (or when a lease was denied).
func (e *escrow) fetch(ctx context.Context, ks *keyEscrow, h *Hit, d *Decision, now int64) error {
	c := h.Cost
	k := c
	if ks.last != 0 && now > ks.last {
		// The key's rate here, hits since the last call over the time
		// since, times the period: what one period needs.
		k = max(c, (ks.seen*int64(e.period)+(now-ks.last)-1)/(now-ks.last))
	}
	rem := ks.rem
	if rem < 0 {
		rem = h.Rule.Capacity() // before the store's first answer
	}
	k = min(k, max(c, rem/escrowShare)) // near the limit, small leases
	most := h.maxCost()
	k = min(k, most)
	if e.closed.Load() {
		k = c
	}
	lease := k > c
	var wait chan struct{}
	if lease {
		// One lease call at a time per key: the other hits wait for it.
		// Plain takes go concurrently, as without escrow (and share
		// the store's group commit).
		wait = make(chan struct{})
		ks.wait = wait
	}
	ks.seen, ks.last = 0, now
	rule, key := h.Rule, ks.key
	ks.mu.Unlock()

	ctx, cancel := e.l.budget(ctx)
	defer cancel()
	var res Result
	var err error
	sent := e.mono()
	for {
		hit := Hit{Rule: rule, Key: key, Cost: k}
		if lease {
			hit.Lease = e.period
		}
		var rs []Result
		rs, err = e.l.store.Take(ctx, []Hit{hit})
		if err == nil && len(rs) != 1 {
			err = fmt.Errorf("store returned %d results for 1 hit", len(rs))
		}
		if err != nil {
			break
		}
		res = rs[0]
		if res.Allowed || !lease {
			break
		}
		// The lease did not fit: the hit alone may.
		lease, k, sent = false, c, e.mono()
	}
	recv := e.mono()

	ks.mu.Lock()
	if wait != nil {
		ks.wait = nil
		close(wait)
	}
	if err != nil {
		ks.mu.Unlock()
		return storeError("take", err)
	}
	ks.rem = max(0, res.Remaining)
	if !lease {
		d.decideOne(true, &Hit{Rule: rule, Key: h.Key, Cost: c}, &res)
		if !res.Allowed {
			ks.denyUntil = sent + int64(min(res.RetryAfter, e.period))
			ks.denySent, ks.denyRecv, ks.denyCost, ks.denyRule, ks.deny = sent, recv, c, rule, res
		} else {
			ks.denyUntil = 0
		}
		ks.mu.Unlock()
		return nil
	}
	g := &grant{ks: ks, hit: Hit{Rule: rule, Key: key, Cost: k, Lease: e.period}, stamp: res.Stamp, res: res,
		used: c, end: sent + int64(res.Lease), recv: recv, serial: 1}
	ks.g, ks.denyUntil = g, 0
	g.decision(h, d, recv)
	ks.mu.Unlock()
	e.mu.Lock()
	e.held[g] = struct{}{}
	e.mu.Unlock()
	if e.closed.Load() {
		// Close may have given back the leases before this one was
		// held: give its units back now (giveBack returns each lease
		// once).
		_ = e.giveBack(true)
	}
	return nil
}

// decision writes into d the decision of the hit h (g's rule and key),
// the lease's hit number g.serial, decided from the lease at now:
// Remaining is what the store reported left at the grant and the lease's
// units not used yet, ResetAfter the grant's, counted down from its
// answer (so never shorter than the store's). ks.mu must be held.
func (g *grant) decision(h *Hit, d *Decision, now int64) {
	*d = Decision{
		Allowed: true, Recorded: true,
		Policy: h.Rule.Name, Limit: h.Rule.Limit, Window: h.Rule.Window,
		Remaining:  g.res.Remaining + g.hit.Cost - g.used,
		ResetAfter: max(0, g.res.ResetAfter-time.Duration(now-g.recv)),
	}
	d.ticket = ticket{taken: true, one: Receipt{Hit: *h, Stamp: g.stamp}, lease: g, unit: g.serial}
}

// denial writes into d the held denial of ks for h at now: the store's
// figures, RetryAfter counted down from before the call was sent (so it
// never outlasts the store's), ResetAfter from its answer. ks.mu must be
// held.
func (ks *keyEscrow) denial(h *Hit, d *Decision, now int64) {
	r := ks.deny
	r.RetryAfter -= time.Duration(now - ks.denySent)
	r.ResetAfter = max(0, r.ResetAfter-time.Duration(now-ks.denyRecv))
	r.Stamp = Stamp{}
	d.decideOne(false, h, &r)
}

// refund undoes the hit of d, decided from a lease: while the lease
// lasts, its unit goes back to the lease (it may decide another hit);
// once it ended, a store Refund of the lease's stamp credits what the
// store's rules allow (nothing if the lease's unused units went back
// already: a refund of a take is made once).
func (e *escrow) refund(ctx context.Context, d *Decision) error {
	g := d.ticket.lease
	c := d.ticket.one.Hit.Cost
	ks := g.ks
	ks.mu.Lock()
	if _, done := g.refunded[d.ticket.unit]; done {
		ks.mu.Unlock()
		return nil
	}
	if g.refunded == nil {
		g.refunded = make(map[uint64]struct{})
	}
	g.refunded[d.ticket.unit] = struct{}{}
	if !g.returned {
		g.used -= c
		ks.mu.Unlock()
		return nil
	}
	ks.mu.Unlock()
	ctx, cancel := e.l.budget(ctx)
	defer cancel()
	h := g.hit
	h.Cost = c
	if err := e.l.store.Refund(ctx, []Receipt{{Hit: h, Stamp: g.stamp}}); err != nil {
		return storeError("refund", err)
	}
	return nil
}

// forget drops what the Limiter holds of key under rule (a Reset through
// it, or a refund): the held denial, and on a Reset the lease, whose
// units the reset state no longer holds.
func (e *escrow) forget(rule Rule, key string, lease bool) {
	ks := e.slot(&rule, key)
	ks.mu.Lock()
	if ks.is(&rule, key) {
		ks.denyUntil = 0
		if lease && ks.g != nil {
			ks.g.returned = true
			ks.g = nil
		}
	}
	ks.mu.Unlock()
}

// creditsNothing reports whether a Refund of unused units of g, sent at
// now (mono), would credit nothing by the rules of [Store.Refund]: a token
// bucket credits max(0, unused*T - (then-At)) at the store's time then,
// and At, the grant's time plus Lease, is before recv+Lease; a fixed
// window or counter credits only within the window of the grant, which
// ended at recv+Lease at the latest when the lease was cut at its end.
// (The store's clock runs as fast as this one; a refund skipped wrongly
// would lose units, never admit more.)
func (g *grant) creditsNothing(unused, now int64) bool {
	r := &g.hit.Rule
	switch r.Algorithm {
	case TokenBucket:
		// In µs, T as the stores compute it, ceil(W/L): below 2^53
		// times a bucket's capacity (Rule.Validate).
		t := (int64(r.Window/time.Microsecond) + r.Limit - 1) / r.Limit
		return (now-g.recv-int64(g.res.Lease))/int64(time.Microsecond) >= unused*t
	case FixedWindow, SlidingWindowCounter:
		return g.res.Lease < g.hit.Lease && now-g.recv >= int64(g.res.Lease)
	}
	return false
}

// sweeper gives back the unused units of the leases that ended, every
// quarter period, until Close.
func (e *escrow) sweeper() {
	defer close(e.done)
	t := time.NewTicker(e.period / 4)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.giveBack(false)
		}
	}
}

// giveBack returns the unused units of the leases that ended (all of
// them, with all), in one store call.
func (e *escrow) giveBack(all bool) error {
	now := e.mono()
	e.mu.Lock()
	var receipts []Receipt
	for g := range e.held {
		ks := g.ks
		ks.mu.Lock()
		if g.returned || all || now >= g.end {
			if !g.returned {
				g.returned = true
				if unused := g.hit.Cost - g.used; unused > 0 && !g.creditsNothing(unused, now) {
					h := g.hit
					h.Cost = unused
					receipts = append(receipts, Receipt{Hit: h, Stamp: g.stamp})
				}
			}
			delete(e.held, g)
		}
		ks.mu.Unlock()
	}
	e.mu.Unlock()
	if len(receipts) == 0 {
		return nil
	}
	ctx, cancel := e.l.budget(context.Background())
	defer cancel()
	if err := e.l.store.Refund(ctx, receipts); err != nil {
		// The units are lost until their stamps expire: fewer
		// admissions for a while, never more.
		return storeError("refund", err)
	}
	return nil
}

// close stops the sweeper and gives back every lease's unused units.
func (e *escrow) close() error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.stop)
	<-e.done
	return e.giveBack(true)
}
