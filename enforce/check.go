package enforce

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algo"
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
	// Peek asks about the hit without recording it, with the key's
	// figures as they stand (a hit of cost 0 asks about one). An enforced
	// peek that is denied denies the request. An Overdraw peek passes a
	// key at its limit exactly and is denied only while the key owes, as
	// envoyproxy/ratelimit answers a request that counts over the limit
	// (the store's answers; not the local limits').
	Peek bool
}

// Verdict is what [Gate.Check] decided about one hit of a request.
type Verdict struct {
	// Hit is the hit as it was decided: its key replaced by its SHA-256
	// digest if longer than 1 MiB, under the rule in force for that key
	// (after the limiter's overrides: floodgate.Limiter.InForce), its
	// cost normalized (zero means 1). A transport reports this rule.
	Hit floodgate.Hit
	// Decision is the hit's own decision, under its Policy: the store's,
	// the local limits', or Check's own for a hit that can never be
	// admitted. A peek's figures are the key's as they stand. It is the
	// zero Decision (its Policy empty) for a hit that nothing decided:
	// the store failed and its failure mode did not ask the local limits,
	// it is a shadow take of a denied request or a shadow peek of a
	// request that a peek or a hit that can never be admitted denied, or
	// it is an invalid shadow hit (one that names the key and rule of
	// another hit of its kind among them).
	Decision floodgate.Decision

	cls uint8 // its class in Check's pass
}

// decided reports whether something decided the hit.
func (v *Verdict) decided() bool { return v.Decision.Policy != "" }

// Option changes how [Gate.Check] decides one request.
type Option struct {
	unavailable error
	oversize    bool
}

// Unavailable decides the request by its hits' failure modes, as if the
// store had failed with err, without asking it: for a transport that
// sheds load (the RLS service's large requests in flight). The decision
// is counted and logged as a degraded one; shadow hits are not checked.
func Unavailable(err error) Option { return Option{unavailable: err} }

// DenyOversize answers the request's hits that the rule in force for
// their key could never admit (a cost above that rule's capacity, or
// above a sliding log's 100 a hit, or a rule whose Limit is 0: an RLS
// requests_per_unit of 0) as denials for a whole window, without asking
// the store, where Check refuses them with an error. An enforced one
// denies the request as a denied peek does.
func DenyOversize() Option { return Option{oversize: true} }

// Check decides the hits of one request in one pass, and returns the
// final verdict on it and, in Result.Each, on each hit. Each hit is
// resolved once, under the rule in force for its key. The peeks are asked
// in one store Peek; a denied enforced peek, or an enforced hit that can
// never be admitted ([DenyOversize]), denies the request, whose takes are
// then only peeked, for their figures. Otherwise the enforced takes are
// taken in one store Take, all-or-nothing, within the limiter's budget,
// by their failure modes if the store fails, waiting if the gate
// throttles; then, if the request is admitted, the shadow takes, each
// recorded if within its own limit (in one Take, and one more without the
// denied ones while one is). A Take records every hit it admits, so peeks
// and takes cost two store calls, any other request one, plus its shadow
// takes'. Every request is counted once in the decisions metric, and
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
	p := pass{g: g, req: hits, res: Result{Outcome: Skipped, Each: make([]Verdict, len(hits))}}
	for _, o := range opts {
		shed = cmp.Or(o.unavailable, shed)
		p.oversize = p.oversize || o.oversize
	}
	res, err := p.run(ctx, shed)
	if err != nil {
		// Refused, not admitted, for a caller that looks only at
		// Allowed; and not counted: nothing was decided.
		return Result{Outcome: FailedClosed, Err: err}, err
	}
	return res, nil
}

// The classes of a request's hits, as a pass sorts them (Verdict.cls): a
// mask of them selects hits.
const (
	enforcedPeek uint8 = 1 << iota
	enforcedTake
	shadowPeek
	shadowTake
	never   // cannot be admitted (DenyOversize)
	skipped // an invalid shadow hit
	pending // a shadow take not yet decided (shadowTakes)

	peeks    = enforcedPeek | shadowPeek
	enforced = enforcedPeek | enforcedTake
)

// pass is one request on its way through Check: its hits and the result
// so far, whose Each holds each hit's class.
type pass struct {
	g   *Gate
	req []Hit
	res Result

	oversize    bool // DenyOversize
	denied      bool // an enforced hit can never be admitted, or its peek was denied
	anyEnforced bool // the request has an enforced hit
	anyShadow   bool // the request has a shadow hit
	counted     bool // the request was counted in the decisions metric
}

func (p *pass) run(ctx context.Context, shed error) (Result, error) {
	for i := range p.req {
		if err := p.resolve(i); err != nil {
			return Result{}, err
		}
		p.anyEnforced = p.anyEnforced || !p.req[i].Shadow
		p.anyShadow = p.anyShadow || p.req[i].Shadow
	}
	if p.anyShadow {
		p.skipDuplicateShadows()
	}
	if shed != nil {
		switch {
		case p.denied:
			p.deny()
		case p.count(enforced, false) > 0:
			p.failed(ctx, enforced, shed, time.Now())
		default:
			return p.res, nil // shadow hits only: nothing to decide
		}
		p.g.m.decision(p.res)
		return p.res, nil
	}
	if p.count(peeks, false) > 0 {
		if err := p.peeks(ctx); err != nil {
			return Result{}, err
		}
	}
	switch {
	case p.denied:
		// Nothing is recorded: the takes are only peeked, for their
		// figures; a store that fails leaves them without.
		if err := p.peek(ctx, enforcedTake); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			p.g.m.storeError(err)
		}
		p.deny()
	case p.res.Err == nil:
		if err := p.takes(ctx); err != nil {
			return Result{}, err
		}
	}
	p.report()
	if !p.counted && (p.anyEnforced || !p.anyShadow) {
		p.g.m.decision(p.res)
	}
	return p.res, nil
}

// resolve sets the verdict's hit of request hit i, under the rule in force
// for its key, and its class; a hit that can never be admitted is decided
// at once.
func (p *pass) resolve(i int) error {
	h, v := &p.req[i], &p.res.Each[i]
	core := h.Hit
	core.Key = fitKey(core.Key)
	if h.Peek {
		core.Overdraw = false // asked as a take within the limit; Overdraw's rule applies to the answer
	}
	if !h.Shadow && !h.Failure.valid() {
		// Refused before the store is asked: a mode from an unchecked
		// value would otherwise fail open in an outage.
		return fmt.Errorf("%w: gate %q: hit %d (%s): unknown failure mode %d", ErrInvalid, p.g.spec.Name, i, h.Rule.Name, h.Failure)
	}
	in, err := p.g.e.limiter.InForce(core)
	v.Hit = in
	switch {
	case err == nil:
		v.cls = enforcedTake
		if h.Peek {
			v.cls = enforcedPeek
		}
		if h.Shadow {
			v.cls <<= 2 // its shadow class
		}
		return nil
	case p.oversize && (admitsNothing(core.Rule) || errors.Is(err, floodgate.ErrInvalidHit) && !errors.Is(err, floodgate.ErrInvalidRule) && oversize(in)):
		// A whole window over the limit, as envoyproxy/ratelimit answers
		// it, and no error: Envoy lets a request through on an error by
		// default, and the cost may come from the request.
		w := in.Rule.Window
		v.Decision = floodgate.Decision{Policy: cmp.Or(h.Policy, h.Rule.Name), Limit: in.Rule.Limit, Window: w, ResetAfter: w, RetryAfter: w}
		v.cls = never
		p.denied = p.denied || !h.Shadow
		return nil
	case h.Shadow:
		v.cls = skipped // the caller's input, not the store, is at fault: a shadow hit never fails a request
		return nil
	}
	return err
}

// skipDuplicateShadows makes skipped each shadow hit that names the key
// and rule of another hit of the store call that asks it: an enforced
// peek or an earlier shadow one, for a shadow peek; an earlier shadow
// take, for a shadow take. The store refuses a call that names one twice,
// and a shadow hit never fails a request.
func (p *pass) skipDuplicateShadows() {
	for i := range p.req {
		v := &p.res.Each[i]
		if !p.in(i, shadowPeek|shadowTake, false) {
			continue
		}
		kind := shadowTake // the shadow takes' own call
		if p.req[i].Peek {
			kind = peeks // one call with the enforced peeks
		}
		for j := range p.req {
			w := &p.res.Each[j]
			if j != i && (j < i || !p.req[j].Shadow) && p.in(j, kind, false) && w.Hit.Rule.Name == v.Hit.Rule.Name && w.Hit.Key == v.Hit.Key {
				v.cls = skipped
				break
			}
		}
	}
}

// oversize reports whether h, resolved, costs more than its rule could
// ever admit: above its capacity (an Overdraw hit's bound past it), or a
// sliding log's cost of one hit.
func oversize(h floodgate.Hit) bool { return h.Cost > algo.MaxCost(h) }

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

// in reports whether hit i is of a class of m, and a FailLocal one if
// local.
func (p *pass) in(i int, m uint8, local bool) bool {
	return p.res.Each[i].cls&m != 0 && (!local || p.req[i].Failure == FailLocal)
}

// count returns how many hits are of a class of m (FailLocal ones only,
// if local).
func (p *pass) count(m uint8, local bool) int {
	n := 0
	for i := range p.req {
		if p.in(i, m, local) {
			n++
		}
	}
	return n
}

// hits appends to buf the hits of a class of m (FailLocal ones only, if
// local) as they are decided (the verdicts' hits), with how they are
// enforced.
func (p *pass) hits(buf []Hit, m uint8, local bool) []Hit {
	for i := range p.req {
		if p.in(i, m, local) {
			h := p.req[i]
			h.Hit = p.res.Each[i].Hit
			buf = append(buf, h)
		}
	}
	return buf
}

// set makes d, a decision on the hits of a class of m (FailLocal ones
// only, if local) in order, their verdicts.
func (p *pass) set(m uint8, local bool, d floodgate.Decision) {
	k := 0
	for i := range p.req {
		if !p.in(i, m, local) {
			continue
		}
		v := &p.res.Each[i]
		switch {
		case d.Each == nil && k == 0:
			v.Decision = d
		case k < len(d.Each):
			v.Decision = d.Each[k]
		}
		k++
	}
}

// clear leaves the hits of a class of m undecided.
func (p *pass) clear(m uint8) {
	for i := range p.req {
		if p.in(i, m, false) {
			p.res.Each[i].Decision = floodgate.Decision{}
		}
	}
}

// peeks asks the store about the request's peeks, in one call. An
// enforced one denied (an Overdraw one past its limit) denies the
// request, which is then not checked against its shadow limits. A failed
// store decides the enforced hits by their failure modes, unless the
// request is denied already.
func (p *pass) peeks(ctx context.Context) error {
	err := p.peek(ctx, peeks)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, floodgate.ErrInvalidHit) || errors.Is(err, floodgate.ErrInvalidRule):
		return err
	default:
		p.g.m.storeError(err)
		switch {
		case p.denied:
			// Denied already: the store failing changes nothing.
		case p.count(enforcedPeek, false) > 0:
			p.failed(ctx, enforced, err, time.Now())
		case p.count(enforcedTake, false) > 0:
			// Only shadow peeks failed, which never fail a request: they
			// stay undecided, and the takes are asked.
		default:
			p.failedShadow(err)
		}
		return nil
	}
	for i := range p.req {
		v := &p.res.Each[i]
		if p.in(i, peeks, false) && p.req[i].Overdraw && !v.Decision.Allowed && v.Decision.Remaining >= 0 {
			v.Decision.Allowed, v.Decision.RetryAfter = true, 0 // at its limit, not past it
		}
		if p.in(i, enforcedPeek, false) && !v.Decision.Allowed {
			p.denied = true
			p.clear(shadowPeek)
		}
	}
	return nil
}

// failedShadow counts and logs a request of shadow hits only that went
// through because the store failed with err on them, which never deny.
func (p *pass) failedShadow(err error) {
	p.res.Err = err
	p.g.m.policy("")[FailedOpen].Inc()
	p.g.logFailed(time.Now(), FailOpen, FailedOpen, err)
	p.counted = true
}

// peek asks the store about the hits of a class of m in one call and sets
// their verdicts.
func (p *pass) peek(ctx context.Context, m uint8) error {
	var hbuf [4]Hit
	var cbuf [4]floodgate.Hit
	hs := p.hits(hbuf[:0], m, false)
	if len(hs) == 0 {
		return nil
	}
	start := time.Now()
	d, err := ask(ctx, p.g.e.limiter, coreHits(cbuf[:0], hs), true)
	p.g.m.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	rename(&d, hs)
	p.set(m, false, d)
	return nil
}

// takes checks the enforced takes, all-or-nothing (throttling if the gate
// does), and, if the request is admitted, the shadow takes.
func (p *pass) takes(ctx context.Context) error {
	switch {
	case p.count(enforcedTake, false) > 0:
		var hbuf [4]Hit
		hs := p.hits(hbuf[:0], enforcedTake, false)
		res, err := p.g.decide(ctx, hs)
		if err == nil && p.g.spec.MaxDelay > 0 && p.g.throttles(res, hs) {
			res, err = p.g.throttle(ctx, hs, res)
		}
		if err != nil {
			return err
		}
		p.adopt(enforcedTake, res)
	case p.count(enforcedPeek, false) > 0:
		p.res.Outcome, p.res.limiter = Allowed, p.g.e.limiter
		p.res.Decision = p.combine(enforcedPeek)
	}
	if p.count(shadowTake, false) == 0 || p.anyEnforced && p.res.Outcome != Allowed {
		return nil
	}
	if err := p.shadowTakes(ctx); err != nil && !p.anyEnforced && !p.decidedShadow() {
		p.failedShadow(err)
	}
	return nil
}

// adopt makes res, the decision on the hits of a class of m (or their
// failure modes'), the request's, and sets their verdicts: a Local
// decision's on the FailLocal hits alone.
func (p *pass) adopt(m uint8, res Result) {
	each := p.res.Each
	p.res = res
	p.res.Each = each
	if res.limiter != nil {
		p.set(m, res.Outcome == Local, res.Decision)
	}
}

// decidedShadow reports whether a shadow hit has a verdict of the store.
func (p *pass) decidedShadow() bool {
	for i := range p.req {
		if p.in(i, shadowPeek|shadowTake, false) && p.res.Each[i].decided() {
			return true
		}
	}
	return false
}

// combine returns the decision on the enforced hits of a class of m from
// their verdicts: the worst on top, each in Each when there are several.
func (p *pass) combine(m uint8) floodgate.Decision {
	var ds []floodgate.Decision
	for i := range p.req {
		if p.in(i, m, false) && !p.req[i].Shadow && p.res.Each[i].decided() {
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
	p.res.Outcome, p.res.limiter, p.res.Err = Denied, p.g.e.limiter, nil
	p.res.Decision = p.combine(enforced | never)
}

// report sets the request's shadow decisions from their verdicts, counts
// them and logs their denials. A shadow hit that can never be admitted is
// one, denied, when the shadow takes were asked (takes): for a request
// that the enforced hits admitted, or that had none (Result.Shadow).
func (p *pass) report() {
	p.res.gate = p.g // which Hold needs, for the shadow leases
	asked := !p.anyEnforced || p.res.Outcome == Allowed
	for i := range p.req {
		v := &p.res.Each[i]
		if v.decided() && (p.in(i, shadowPeek|shadowTake, false) || asked && p.req[i].Shadow && p.in(i, never, false)) {
			p.res.Shadow = append(p.res.Shadow, v.Decision)
			p.g.shadowed(v.Decision)
		}
	}
}

// shadowed counts a shadow hit's decision d, and logs it if it denied, in
// aggregate (g.shadowLog).
func (g *Gate) shadowed(d floodgate.Decision) {
	g.m.shadowed(d.Policy, d.Allowed)
	if !d.Allowed {
		g.shadowLog.do(time.Now(), func(held int) {
			g.e.logger.LogAttrs(context.Background(), slog.LevelInfo, "floodgate: a shadow limit would have denied a request",
				slog.String("gate", g.spec.Name), slog.String("policy", d.Policy), slog.Duration("retry_after", d.RetryAfter),
				slog.Int("suppressed", held))
		})
	}
}

// shadowTakes records each shadow take that is within its limit, and
// sets its verdict: all of them in one Take, and, when one is denied (so
// that nothing was recorded), the others in another, until none is. A
// store that fails decides nothing more; it returns the store's error
// (not ctx's).
func (p *pass) shadowTakes(ctx context.Context) error {
	for i := range p.req {
		if p.in(i, shadowTake, false) {
			p.res.Each[i].cls |= pending
		}
	}
	defer func() {
		for i := range p.res.Each {
			p.res.Each[i].cls &^= pending
		}
	}()
	for p.count(pending, false) > 0 {
		hs := p.hits(nil, pending, false)
		d, err := ask(ctx, p.g.e.limiter, coreHits(nil, hs), false)
		switch {
		case errors.Is(err, floodgate.ErrInvalidHit):
			return nil // two of them name one key under one rule: the caller's input is at fault, and a shadow hit never fails a request
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			p.g.m.storeError(err)
			return err
		}
		rename(&d, hs)
		p.set(pending, false, d)
		if d.Recorded {
			return nil
		}
		// Nothing was recorded: the denied ones are decided, the others
		// are taken again without them.
		each, k, left := fields.Each(d), 0, 0
		for i := range p.req {
			if !p.in(i, pending, false) {
				continue
			}
			if k < len(each) && !each[k].Allowed && !hs[k].Overdraw {
				p.res.Each[i].cls &^= pending
			} else {
				left++
			}
			k++
		}
		if left == len(hs) {
			return nil
		}
	}
	return nil
}

// ask decides hits with l: a take, or a peek whose figures are the keys'
// as they stand. An allowed Peek reports each key as after its hit, a
// denied one as it stands (nothing of it would be taken).
func ask(ctx context.Context, l *floodgate.Limiter, hits []floodgate.Hit, peek bool) (floodgate.Decision, error) {
	if !peek {
		return l.Check(ctx, hits...)
	}
	d, err := l.Peek(ctx, hits...)
	if err != nil || !d.Allowed {
		return d, err
	}
	if d.Each == nil {
		d.Remaining += hits[0].Cost // resolved: at least 1
		return d, nil
	}
	worst := 0
	for i := range d.Each {
		d.Each[i].Remaining += hits[i].Cost
		if d.Each[i].Worse(d.Each[worst]) {
			worst = i
		}
	}
	top := d.Each[worst]
	top.Allowed, top.Each = true, d.Each
	return top, nil
}

// decide takes hits, which are resolved, in one store call, and, if the
// store fails, applies their failure modes. It returns an error only when
// ctx is done or a hit is invalid. The decisions report each hit under
// its Policy.
func (g *Gate) decide(ctx context.Context, hits []Hit) (Result, error) {
	start := time.Now()
	var cbuf [4]floodgate.Hit
	d, err := g.e.limiter.Check(ctx, coreHits(cbuf[:0], hits)...)
	g.m.latency.Observe(time.Since(start).Seconds())
	if err == nil {
		rename(&d, hits)
		res := Result{Outcome: Allowed, Decision: d, gate: g, limiter: g.e.limiter}
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

// failed decides the request's hits of a class of m by their failure
// modes, the store having failed with err (or the request shed), and sets
// their verdicts: the peeks first, and the takes if the peeks' modes
// admit the request.
func (p *pass) failed(ctx context.Context, m uint8, err error, start time.Time) {
	for _, part := range [2]uint8{m & peeks, m &^ peeks} {
		if p.count(part, false) > 0 {
			p.adopt(part, p.g.failed(ctx, p.hits(nil, part, false), err, start))
			if !p.res.Allowed() {
				return
			}
		}
	}
}

// failed applies the failure modes of hits, all peeks or all takes, to
// the store's error err: the FailLocal hits are decided by the local
// limits.
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
		if d, lerr := ask(ctx, g.e.local, coreHits(nil, local), local[0].Peek); lerr == nil {
			rename(&d, local)
			res = Result{Outcome: Local, Decision: d, Err: err, gate: g, limiter: g.e.local}
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

// coreHits appends the core's hits of hs to buf.
func coreHits(buf []floodgate.Hit, hs []Hit) []floodgate.Hit {
	buf = slices.Grow(buf, len(hs))
	for _, h := range hs {
		buf = append(buf, h.Hit)
	}
	return buf
}

// rename reports each decision of d, the decision on hits, under its
// hit's Policy, where one is set.
func rename(d *floodgate.Decision, hits []Hit) {
	top := -1
	for i, h := range hits {
		if d.Each != nil && i < len(d.Each) {
			if e := &d.Each[i]; top < 0 && e.Policy == d.Policy && e.Limit == d.Limit && e.Window == d.Window &&
				e.Remaining == d.Remaining && e.ResetAfter == d.ResetAfter && e.RetryAfter == d.RetryAfter {
				top = i // the hit whose figures the request reports (two may share a rule)
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
