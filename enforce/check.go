package enforce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/floodgate-rl/floodgate/internal/fields"
)

// Hit is a hit with how it is enforced.
type Hit struct {
	floodgate.Hit
	// Shadow checks and counts the hit on its own but never lets it deny
	// (see Limit.Shadow).
	Shadow bool
	// Policy is the name the hit is reported under (the decisions'
	// Policy, the metrics' policy label, the logs): the name a
	// configuration gave the limit. Empty means the rule's name, which
	// also names its state in the store.
	Policy string
	// Failure is what the hit does when the store fails. With several
	// modes in one check, the strictest decides (see FailureMode); when
	// it is FailLocal, the FailLocal hits are decided by the local
	// limiter and the FailOpen ones pass.
	Failure FailureMode
	// Peek asks about the hit without recording it: what a take would
	// decide now, with the key's figures as they stand (an allowed peek's
	// Remaining does not count the hit; a hit of cost 0 asks about one).
	// An enforced peek that is denied denies the request: its takes are
	// then not recorded, and their figures are the keys' as they stand.
	// An Overdraw peek asks whether the key is past its limit: it is
	// allowed at the limit exactly, with 0 left, and denied only while
	// the key owes (how envoyproxy/ratelimit answers a request that
	// counts over the limit). That rule applies to the store's answers,
	// not to the local limits' (FailLocal).
	Peek bool
	// DenyOversize answers a hit that the rule in force for its key could
	// never admit (a cost above that rule's capacity, or a rule whose
	// Limit is 0: an RLS requests_per_unit of 0) as a denial for a whole
	// window, without asking the store, where [Gate.Check] refuses it with
	// an error. An enforced one denies the request as a denied peek does.
	DenyOversize bool
}

// Verdict is what [Gate.Check] decided about one hit of a request.
type Verdict struct {
	// Hit is the hit as it was decided: its key replaced by its SHA-256
	// digest if longer than 1 MiB, under the rule in force for that key
	// (after the limiter's overrides: floodgate.Limiter.InForce), its
	// cost normalized (zero means 1). A transport reports this rule.
	Hit floodgate.Hit
	// Decision is the hit's own decision, under its Policy, when Decided:
	// the store's, the local limits', or Check's own for a hit that can
	// never be admitted. A peek's figures are the key's as they stand.
	Decision floodgate.Decision
	// Decided reports whether Decision is set. A hit is undecided when the
	// store failed and its failure mode did not ask the local limits, when
	// it is a shadow hit of a request that was denied, or when it is
	// invalid and shadow (skipped).
	Decided bool
}

// Option changes how [Gate.Check] decides one request.
type Option struct{ unavailable error }

// Unavailable decides the request by its hits' failure modes, as if the
// store had failed with err, without asking it: for a transport that
// sheds load (the RLS service's large requests in flight). The decision
// is counted and logged as a degraded one; shadow hits are not checked.
func Unavailable(err error) Option { return Option{unavailable: err} }

// Check decides the hits of one request, in one pass, and returns a
// final verdict: on the request, and in Result.Each on each hit.
//
// Each hit is resolved once, under the rule in force for its key, before
// the store is asked. A hit that can never be admitted (DenyOversize) is
// denied without asking it. The peeks (Hit.Peek) are asked in one store
// Peek; an enforced one that is denied, or an enforced hit that can
// never be admitted, denies the request, and then the takes are not
// recorded: the same Peek gives their figures, and nothing else is asked.
// Otherwise the enforced takes are checked in one store Take, together,
// all-or-nothing, within the limiter's time budget, by their failure
// modes if the store fails, waiting if the gate throttles; then, if the
// request is admitted, the shadow takes, each recorded if within its own
// limit (one Take for all of them, and one more without those denied, as
// long as one is). The store's contract keeps a Peek and a Take apart
// (Take records every hit it admits), so a request of peeks and takes
// costs the store two calls, and any other request one (plus its shadow
// takes'). Every request is counted once in the decisions metric, and
// degraded ones are logged.
//
// Rules need not be among the Spec's limits: a gate may check rules that
// come with each request (an RLS domain's descriptors). The error is
// non-nil only when ctx is done (nobody waits for the answer) or an
// enforced hit is invalid (it wraps floodgate.ErrInvalidHit or
// ErrInvalidRule, or ErrInvalid for a failure mode that does not exist:
// the caller's input is at fault, not the store, so no failure mode
// applies); an invalid shadow hit is skipped.
//
// A request with no enforced hit is Skipped, and counted so if it has no
// shadow hit either.
func (g *Gate) Check(ctx context.Context, hits []Hit, opts ...Option) (Result, error) {
	var shed error
	for _, o := range opts {
		if o.unavailable != nil {
			shed = o.unavailable
		}
	}
	p := pass{g: g, req: hits, res: Result{Outcome: Skipped, Each: make([]Verdict, len(hits))}}
	res, err := p.run(ctx, shed)
	if err != nil {
		// Refused, not admitted, for a caller that looks only at
		// Allowed; and not counted: nothing was decided.
		return Result{Outcome: FailedClosed, Err: err}, err
	}
	return res, nil
}

// kind is how a hit of a request is decided.
type kind uint8

const (
	take  kind = iota // recorded if admitted
	peek              // asked, never recorded
	never             // denied without asking: DenyOversize
	skip              // an invalid shadow hit
)

// pass is one request on its way through Check: its hits, how each is
// decided, and the result so far.
type pass struct {
	g     *Gate
	req   []Hit
	kinds []kind
	res   Result
	// The hits by kind, indices into req: enforced peeks and takes, shadow
	// peeks and takes.
	ep, et, sp, st []int
	denied         bool // an enforced hit can never be admitted, or its peek was denied
	enforced       bool // the request has an enforced hit
	shadow         bool // the request has a shadow hit
	counted        bool // the request was counted in the decisions metric
}

func (p *pass) run(ctx context.Context, shed error) (Result, error) {
	var kbuf [8]kind
	p.kinds = kbuf[:0]
	for i := range p.req {
		k, err := p.resolve(i)
		if err != nil {
			return Result{}, err
		}
		p.kinds = append(p.kinds, k)
	}
	p.split()
	if shed != nil {
		switch {
		case p.denied:
			p.deny()
		case len(p.ep)+len(p.et) > 0:
			p.failed(ctx, slices.Concat(p.ep, p.et), shed, time.Now())
		default:
			return p.res, nil // shadow hits only: nothing to decide
		}
		p.g.m.decision(p.res)
		return p.res, nil
	}
	if p.denied || len(p.ep)+len(p.sp) > 0 {
		if err := p.peeks(ctx); err != nil {
			return Result{}, err
		}
	}
	if !p.denied && p.res.Err == nil {
		if err := p.takes(ctx); err != nil {
			return Result{}, err
		}
	}
	if p.denied {
		p.deny()
	}
	p.report()
	if !p.counted && (p.enforced || !p.shadow) {
		p.g.m.decision(p.res)
	}
	return p.res, nil
}

// resolve sets the verdict's hit of request hit i, under the rule in force
// for its key, and returns how it is decided; a hit that can never be
// admitted is decided at once.
func (p *pass) resolve(i int) (kind, error) {
	h, v := &p.req[i], &p.res.Each[i]
	core := h.Hit
	core.Key = fitKey(core.Key)
	if h.Peek {
		core.Overdraw = false // asked as a take within the limit; Overdraw's rule applies to the answer
	}
	if !h.Shadow && !h.Failure.valid() {
		// Refused before the store is asked: a mode from an unchecked
		// value would otherwise fail open in an outage.
		return 0, fmt.Errorf("%w: gate %q: hit %d (%s): unknown failure mode %d", ErrInvalid, p.g.spec.Name, i, h.Rule.Name, h.Failure)
	}
	in, err := p.g.e.limiter.InForce(core)
	v.Hit = in
	switch {
	case err == nil && h.Peek:
		return peek, nil
	case err == nil:
		return take, nil
	case h.DenyOversize && (admitsNothing(core.Rule) || errors.Is(err, floodgate.ErrInvalidHit) && !errors.Is(err, floodgate.ErrInvalidRule)):
		// A whole window over the limit, as envoyproxy/ratelimit answers
		// it, and no error: Envoy lets a request through on an error by
		// default, and the cost may come from the request.
		w := in.Rule.Window
		v.Decision = floodgate.Decision{Policy: policyOf(*h), Limit: in.Rule.Limit, Window: w, ResetAfter: w, RetryAfter: w}
		v.Decided = true
		p.denied = p.denied || !h.Shadow
		return never, nil
	case h.Shadow:
		return skip, nil // the caller's input, not the store, is at fault: a shadow hit never fails a request
	}
	return 0, err
}

// admitsNothing reports whether r is a valid rule but for its Limit of 0:
// one that denies every hit (an RLS requests_per_unit of 0), which no
// override changes.
func admitsNothing(r floodgate.Rule) bool {
	if r.Limit != 0 {
		return false
	}
	r.Limit = 1
	return r.Validate() == nil
}

// policyOf is the name h is reported under.
func policyOf(h Hit) string {
	if h.Policy != "" {
		return h.Policy
	}
	return h.Rule.Name
}

// split sorts the request's hits by kind.
func (p *pass) split() {
	for i, k := range p.kinds {
		h := &p.req[i]
		p.enforced = p.enforced || !h.Shadow
		p.shadow = p.shadow || h.Shadow
		switch {
		case k == peek && !h.Shadow:
			p.ep = append(p.ep, i)
		case k == take && !h.Shadow:
			p.et = append(p.et, i)
		case k == peek:
			p.sp = append(p.sp, i)
		case k == take:
			p.st = append(p.st, i)
		}
	}
}

// hits returns the request's hits idx as they are decided (the verdicts'
// hits), with how they are enforced.
func (p *pass) hits(idx []int) []Hit {
	out := make([]Hit, len(idx))
	for k, i := range idx {
		out[k] = p.req[i]
		out[k].Hit = p.res.Each[i].Hit
	}
	return out
}

// set makes d, a decision on the hits idx in order, their verdicts.
func (p *pass) set(idx []int, d floodgate.Decision) {
	if d.Each == nil {
		if len(idx) == 1 {
			p.res.Each[idx[0]].Decision, p.res.Each[idx[0]].Decided = d, true
		}
		return
	}
	for k, i := range idx {
		if k < len(d.Each) {
			p.res.Each[i].Decision, p.res.Each[i].Decided = d.Each[k], true
		}
	}
}

// peeks asks the store about the request's peeks, in one call, and, when
// the request is denied already or a peek may deny it, about its takes
// too, for their figures. A failed store decides the enforced hits by
// their failure modes, unless the request is denied already.
func (p *pass) peeks(ctx context.Context) error {
	idx := slices.Concat(p.ep, p.sp)
	apart := false // the takes are peeked in a call of their own
	if p.denied || len(p.ep) > 0 {
		apart = p.overlap(idx, p.et)
		if !apart {
			idx = append(idx, p.et...)
		}
	}
	err := p.peek(ctx, idx)
	if err == nil && apart && len(p.et) > 0 {
		err = p.peek(ctx, p.et) // a peek and a take of one key: one call cannot name it twice
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
			return err
		}
		p.g.m.storeError(err)
		p.clear(idx)
		switch {
		case p.denied:
			// Denied already: the store failing changes nothing, and
			// leaves the hits without figures.
		case len(p.ep)+len(p.et) > 0:
			p.failed(ctx, slices.Concat(p.ep, p.et), err, time.Now())
		default:
			// Nothing counted this request: it went through because the
			// store failed on its shadow limits, which never deny.
			p.res.Err = err
			p.g.m.policy("")[FailedOpen].Inc()
			p.g.logFailed(time.Now(), FailOpen, FailedOpen, err)
			p.counted = true
		}
		return nil
	}
	for _, i := range slices.Concat(p.ep, p.sp) {
		v := &p.res.Each[i]
		if p.req[i].Overdraw && !v.Decision.Allowed && v.Decision.Remaining >= 0 {
			v.Decision.Allowed, v.Decision.RetryAfter = true, 0 // at its limit, not past it
		}
	}
	for _, i := range p.ep {
		if !p.res.Each[i].Decision.Allowed {
			p.denied = true
			p.clear(p.sp) // a denied request is not checked against its shadow limits
		}
	}
	if !p.denied {
		p.clear(p.et) // their figures were asked in case the request was denied: it is checked instead
	}
	return nil
}

// overlap reports whether a hit of b names a rule and key of a hit of a.
func (p *pass) overlap(a, b []int) bool {
	for _, i := range b {
		for _, j := range a {
			if hi, hj := &p.res.Each[i].Hit, &p.res.Each[j].Hit; hi.Rule.Name == hj.Rule.Name && hi.Key == hj.Key {
				return true
			}
		}
	}
	return false
}

// peek asks the store about the hits idx in one call and sets their
// verdicts.
func (p *pass) peek(ctx context.Context, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	hs := p.hits(idx)
	start := time.Now()
	d, err := ask(ctx, p.g.e.limiter, coreHits(hs), true)
	p.g.m.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	rename(&d, hs)
	p.set(idx, d)
	return nil
}

// clear leaves the hits idx undecided.
func (p *pass) clear(idx []int) {
	for _, i := range idx {
		p.res.Each[i].Decision, p.res.Each[i].Decided = floodgate.Decision{}, false
	}
}

// takes checks the enforced takes, all-or-nothing (throttling if the gate
// does), and, if the request is admitted, the shadow takes.
func (p *pass) takes(ctx context.Context) error {
	if len(p.et) > 0 {
		hs := p.hits(p.et)
		res, err := p.g.decide(ctx, hs, false)
		if err == nil && p.g.spec.MaxDelay > 0 && p.g.throttles(res) {
			res, err = p.g.throttle(ctx, hs, res)
		}
		if err != nil {
			return err
		}
		p.adopt(p.et, res)
	} else if len(p.ep) > 0 {
		p.res.Outcome, p.res.limiter = Allowed, p.g.e.limiter
		p.res.Decision = p.combine(p.ep)
	}
	if len(p.st) == 0 || p.enforced && p.res.Outcome != Allowed {
		return nil
	}
	err := p.shadowTakes(ctx)
	if err != nil && !p.enforced && !p.decidedShadow() {
		// Nothing counted this request: it went through because the
		// store failed on its shadow limits, which never deny.
		p.res.Err = err
		p.g.m.policy("")[FailedOpen].Inc()
		p.g.logFailed(time.Now(), FailOpen, FailedOpen, err)
		p.counted = true
	}
	return nil
}

// adopt makes res, the decision on the hits idx (or their failure
// modes'), the request's, and sets their verdicts: a Local decision's on
// the FailLocal hits alone.
func (p *pass) adopt(idx []int, res Result) {
	each := p.res.Each
	p.res = res
	p.res.Each = each
	if res.limiter == nil {
		return // the failure mode decided without a limiter
	}
	if res.Outcome == Local {
		var lbuf [8]int
		local := lbuf[:0]
		for _, i := range idx {
			if p.req[i].Failure == FailLocal && !p.req[i].Peek {
				local = append(local, i)
			}
		}
		idx = local
	}
	p.set(idx, res.Decision)
}

// decidedShadow reports whether a shadow hit has a verdict of the store.
func (p *pass) decidedShadow() bool {
	for _, i := range slices.Concat(p.sp, p.st) {
		if p.res.Each[i].Decided {
			return true
		}
	}
	return false
}

// combine returns the decision on the hits idx from their verdicts: the
// worst on top, each in Each when there are several.
func (p *pass) combine(idx []int) floodgate.Decision {
	var ds []floodgate.Decision
	for _, i := range idx {
		if p.res.Each[i].Decided {
			ds = append(ds, p.res.Each[i].Decision)
		}
	}
	switch len(ds) {
	case 0:
		return floodgate.Decision{}
	case 1:
		return ds[0]
	}
	worst, allowed := 0, true
	for k := range ds {
		allowed = allowed && ds[k].Allowed
		if ds[k].Worse(ds[worst]) {
			worst = k
		}
	}
	top := ds[worst]
	top.Allowed, top.Each = allowed, ds
	return top
}

// deny makes the request Denied: an enforced hit can never be admitted,
// or an enforced peek was denied. Nothing was recorded.
func (p *pass) deny() {
	idx := p.enforcedIdx()
	p.res.Outcome, p.res.limiter, p.res.Err = Denied, p.g.e.limiter, nil
	p.res.Decision = p.combine(idx)
}

// enforcedIdx returns the indices of the request's enforced hits.
func (p *pass) enforcedIdx() []int {
	var idx []int
	for i := range p.req {
		if !p.req[i].Shadow {
			idx = append(idx, i)
		}
	}
	return idx
}

// report sets the request's shadow decisions from their verdicts, counts
// them and logs their denials.
func (p *pass) report() {
	p.res.gate = p.g // which Hold needs, for the shadow leases
	for i, k := range p.kinds {
		v := &p.res.Each[i]
		if !p.req[i].Shadow || k == never || !v.Decided {
			continue
		}
		d := v.Decision
		p.res.Shadow = append(p.res.Shadow, d)
		p.res.shadowHits = append(p.res.shadowHits, v.Hit)
		p.g.m.shadowed(d.Policy, d.Allowed)
		if !d.Allowed {
			p.g.shadowLog.do(time.Now(), func(held int) {
				p.g.e.logger.LogAttrs(context.Background(), slog.LevelInfo, "floodgate: a shadow limit would have denied a request",
					slog.String("gate", p.g.spec.Name), slog.String("policy", d.Policy), slog.Duration("retry_after", d.RetryAfter),
					slog.Int("suppressed", held))
			})
		}
	}
}

// shadowTakes records each shadow take that is within its limit, and
// sets its verdict. A store that fails decides nothing more; it returns
// the store's error (not ctx's).
func (p *pass) shadowTakes(ctx context.Context) error {
	pending := p.st
	for len(pending) > 0 {
		hs := p.hits(pending)
		d, err := ask(ctx, p.g.e.limiter, coreHits(hs), false)
		if errors.Is(err, floodgate.ErrInvalidHit) && len(pending) > 1 {
			// Two of them name one key under one rule: one call cannot.
			for _, i := range pending {
				if err := p.shadowTake(ctx, i); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return p.shadowFailed(ctx, err)
		}
		rename(&d, hs)
		p.set(pending, d)
		if d.Recorded {
			return nil
		}
		// Nothing was recorded: the denied ones are decided, the others
		// are taken again without them.
		var next []int
		for k, i := range pending {
			if e := fields.Each(d); k < len(e) && (e[k].Allowed || hs[k].Overdraw) {
				next = append(next, i)
			}
		}
		if len(next) == len(pending) {
			return nil
		}
		pending = next
	}
	return nil
}

// shadowTake records shadow take i if within its limit.
func (p *pass) shadowTake(ctx context.Context, i int) error {
	hs := p.hits([]int{i})
	d, err := ask(ctx, p.g.e.limiter, coreHits(hs), false)
	if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
		return nil // the caller's input, not the store, is at fault: a shadow hit never fails a request
	}
	if err != nil {
		return p.shadowFailed(ctx, err)
	}
	rename(&d, hs)
	p.set([]int{i}, d)
	return nil
}

// shadowFailed counts the store's error err on a shadow take, and returns
// it; nil if ctx is done.
func (p *pass) shadowFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	p.g.m.storeError(err)
	return err
}

// ask decides hits with l: a take, or a peek whose figures are the keys'
// as they stand (asNow).
func ask(ctx context.Context, l *floodgate.Limiter, hits []floodgate.Hit, peek bool) (floodgate.Decision, error) {
	if !peek {
		return l.Check(ctx, hits...)
	}
	d, err := l.Peek(ctx, hits...)
	if err != nil {
		return d, err
	}
	return asNow(d, hits), nil
}

// asNow returns d, a peek's decision on hits, with the keys' figures as
// they stand: an allowed one's Remaining is as before the hits it asked
// about (the core's Peek reports it as after them), and its worst hit is
// picked from those figures. A denied peek reports them as they stand
// already: nothing of it would have been taken.
func asNow(d floodgate.Decision, hits []floodgate.Hit) floodgate.Decision {
	cost := func(h floodgate.Hit) int64 { return max(h.Cost, 1) }
	switch {
	case !d.Allowed:
		return d
	case d.Each == nil:
		if len(hits) == 1 {
			d.Remaining += cost(hits[0])
		}
		return d
	case len(d.Each) != len(hits):
		return d
	}
	worst := 0
	for i := range d.Each {
		d.Each[i].Remaining += cost(hits[i])
		if d.Each[i].Worse(d.Each[worst]) {
			worst = i
		}
	}
	top := d.Each[worst]
	top.Allowed, top.Recorded, top.Each = d.Allowed, d.Recorded, d.Each
	return top
}

// decide asks the store about hits, which are resolved, in one call, a
// peek or a take, and, if the store fails, applies their failure modes.
// It returns an error only when ctx is done or a hit is invalid. The
// decisions report each hit under its Policy.
func (g *Gate) decide(ctx context.Context, hits []Hit, peek bool) (Result, error) {
	start := time.Now()
	core := coreHits(hits)
	d, err := ask(ctx, g.e.limiter, core, peek)
	g.m.latency.Observe(time.Since(start).Seconds())
	if err == nil {
		rename(&d, hits)
		res := Result{Outcome: Allowed, Decision: d, gate: g, limiter: g.e.limiter, hits: core}
		if !d.Allowed {
			res.Outcome = Denied
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule) {
		return Result{}, err // the caller's input, not the store, is at fault
	}
	g.m.storeError(err)
	return g.failed(ctx, hits, err, start), nil
}

// failed decides the request's hits idx by their failure modes, the store
// having failed with err (or the request shed), and sets their verdicts.
// The local limits peek at the FailLocal peeks first, and take the
// FailLocal takes only if the peeks admit the request.
func (p *pass) failed(ctx context.Context, idx []int, err error, start time.Time) {
	var tbuf, lbuf [8]int
	takes, lp := tbuf[:0], lbuf[:0]
	mode := FailOpen
	for _, i := range idx {
		h := &p.req[i]
		if failureRank[h.Failure] > failureRank[mode] {
			mode = h.Failure
		}
		switch {
		case !h.Peek:
			takes = append(takes, i)
		case h.Failure == FailLocal:
			lp = append(lp, i)
		}
	}
	if mode != FailLocal || len(lp) == 0 {
		p.adopt(idx, p.g.failed(ctx, p.hits(idx), err, start))
		return
	}
	hs := p.hits(lp)
	d, lerr := ask(ctx, p.g.e.local, coreHits(hs), true)
	if lerr != nil {
		p.adopt(idx, Result{Outcome: FailedClosed, Err: err})
		p.g.logFailed(start, mode, FailedClosed, err)
		return
	}
	rename(&d, hs)
	p.set(lp, d)
	if !d.Allowed || len(takes) == 0 {
		p.adopt(nil, Result{Outcome: Local, Decision: p.combine(lp), Err: err, gate: p.g, limiter: p.g.e.local})
		p.g.logFailed(start, mode, Local, err)
		return
	}
	p.adopt(takes, p.g.failed(ctx, p.hits(takes), err, start))
}

// failed applies the failure modes of hits to the store's error err: the
// FailLocal hits are decided by the local limits.
func (g *Gate) failed(ctx context.Context, hits []Hit, err error, start time.Time) Result {
	res := Result{Outcome: FailedOpen, Err: err} // no hits: nothing counted them
	mode := FailOpen
	var local []Hit
	for _, h := range hits {
		if failureRank[h.Failure] > failureRank[mode] {
			mode = h.Failure
		}
		if h.Failure == FailLocal {
			local = append(local, h)
		}
	}
	switch mode {
	case FailClosed:
		res.Outcome = FailedClosed
	case FailError:
		res.Outcome = Errored
	case FailLocal:
		res.Outcome = FailedClosed // unless the local limits decide
		lcore := coreHits(local)
		if d, lerr := ask(ctx, g.e.local, lcore, false); lerr == nil {
			rename(&d, local)
			res = Result{Outcome: Local, Decision: d, Err: err, gate: g, limiter: g.e.local, hits: lcore}
		}
	}
	g.logFailed(start, mode, res.Outcome, err)
	return res
}

// logFailed logs a decision that the failure mode made because the store
// failed with err, in aggregate (g.log).
func (g *Gate) logFailed(start time.Time, mode FailureMode, outcome Outcome, err error) {
	g.log.do(start, func(held int) { // may run later, from a timer: no request context
		g.e.logger.LogAttrs(context.Background(), slog.LevelWarn, "floodgate: rate-limit store failed; decided by the failure mode",
			slog.String("gate", g.spec.Name), slog.String("failure_mode", mode.String()),
			slog.String("outcome", outcome.String()), slog.Any("error", err), slog.Int("suppressed", held))
	})
}

// coreHits returns the core's hits of hs.
func coreHits(hs []Hit) []floodgate.Hit {
	out := make([]floodgate.Hit, len(hs))
	for i, h := range hs {
		out[i] = h.Hit
	}
	return out
}

// rename reports each decision of d, the decision on hits, under its
// hit's Policy, where one is set.
func rename(d *floodgate.Decision, hits []Hit) {
	top := -1
	for i, h := range hits {
		if d.Each != nil && i < len(d.Each) {
			if top < 0 && d.Each[i].Policy == d.Policy {
				top = i
			}
			if h.Policy != "" {
				d.Each[i].Policy = h.Policy
			}
		}
	}
	switch {
	case d.Each == nil && len(hits) == 1 && hits[0].Policy != "":
		d.Policy = hits[0].Policy
	case top >= 0:
		d.Policy = d.Each[top].Policy
	}
}

// fitKey returns k, or its digest if it is too long for a hit.
func fitKey(k string) string {
	if len(k) <= bounds.KeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}
