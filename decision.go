package floodgate

import (
	"log/slog"
	"time"
)

// Decision is the limiter's answer to a check. A denial is a Decision with
// Allowed false, not an error.
//
// For a check of several hits, the top-level fields describe the worst of
// them (for a denial, the longest RetryAfter; when allowed, the fewest
// Remaining) and Each holds every hit's own decision, in the order given.
//
// For example, with a rule of 10 per minute and 7 requests in the last
// minute, the next Allow returns Allowed true, Limit 10, Remaining 2.
type Decision struct {
	// Allowed reports whether the request may proceed: every hit was
	// within its limit. When false, nothing was recorded, unless Recorded
	// says that an Overdraw hit went past its limit.
	Allowed bool
	// Recorded reports whether the check recorded its hits, which Refund
	// can undo: always when Allowed (never for a Peek), and when not, for
	// a check whose hits that are not Overdraw were all within their
	// limits (see [Hit.Overdraw]).
	Recorded bool
	// Policy is the name of the rule that this decision describes.
	Policy string
	// Limit is that rule's limit per window.
	Limit int64
	// Window is that rule's window.
	Window time.Duration
	// Remaining is how many more requests the key could make now;
	// negative when it owes (see [Result.Remaining]).
	Remaining int64
	// ResetAfter is the time until the key's quota is fully available.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed; otherwise the exact time until the
	// request would be allowed.
	RetryAfter time.Duration
	// Each holds one decision per hit of a multi-hit check, in order; it is
	// nil for single-hit checks. Each element may be passed to
	// [Limiter.Refund] to undo only that hit.
	Each []Decision

	// ticket is what Refund needs: what the take recorded.
	// It is empty unless Recorded.
	ticket ticket
}

// ticket names what a take recorded: receipts, or the single receipt one
// when receipts is nil (which spares a single-hit decision an
// allocation). The Decision owns them: they are copies of the caller's
// hits.
type ticket struct {
	taken    bool // the decision recorded something
	one      Receipt
	receipts []Receipt
	// lease is the lease (escrow) that decided the hit one, its hit number
	// unit; nil for a decision of the store.
	lease *grant
	unit  uint64
}

// LogValue reports the decision's public fields, never its keys.
func (d Decision) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("allowed", d.Allowed),
		slog.String("policy", d.Policy),
		slog.Int64("limit", d.Limit),
		slog.Int64("remaining", d.Remaining),
		slog.Duration("retry_after", d.RetryAfter),
	)
}

// decide builds the decision for hits from the store's results: the worst
// result on top, every hit's own decision in Each. taken says whether the
// results are a Take's, which an allowed decision can refund,
// or a Peek's.
func decide(taken bool, hits []Hit, results []Result) Decision {
	if len(hits) == 1 {
		var d Decision
		d.decideOne(taken, &hits[0], &results[0])
		return d
	}
	each := make([]Decision, len(hits))
	allowed, recorded := true, true
	for i, r := range results {
		each[i] = Decision{
			Allowed:    r.Allowed,
			Policy:     hits[i].Rule.Name,
			Limit:      hits[i].Rule.Limit,
			Window:     hits[i].Rule.Window,
			Remaining:  r.Remaining,
			ResetAfter: r.ResetAfter,
			RetryAfter: r.RetryAfter,
		}
		allowed = allowed && r.Allowed
		recorded = recorded && (r.Allowed || hits[i].Overdraw)
	}
	worst := 0
	for i := 1; i < len(each); i++ {
		if each[i].Worse(each[worst]) {
			worst = i
		}
	}
	if !recorded {
		// Nothing was recorded: a hit that was within its limit, or an
		// Overdraw hit (which reports the key with it), still has the
		// quota it had before the check.
		for i := range each {
			if each[i].Allowed || hits[i].Overdraw {
				each[i].Remaining += hits[i].cost()
			}
		}
	}
	d := each[worst]
	d.Allowed = allowed
	if recorded && taken {
		receipts := make([]Receipt, len(hits))
		for i := range each {
			receipts[i] = Receipt{Hit: hits[i], Stamp: results[i].Stamp}
			each[i].Recorded = true
			each[i].ticket = ticket{taken: true, one: receipts[i]}
		}
		d.Recorded = true
		d.ticket = ticket{taken: true, receipts: receipts}
	}
	d.Each = each
	return d
}

// decideOne is decide of a single hit, written into d, which is zero. It
// allocates nothing, and copies no Decision: single-hit checks are the hot
// path of a memory store.
func (d *Decision) decideOne(taken bool, h *Hit, r *Result) {
	d.figures(&h.Rule, r)
	if (r.Allowed || h.Overdraw) && taken {
		d.Recorded = true
		d.ticket.taken = true
		d.ticket.one.Hit, d.ticket.one.Stamp = *h, r.Stamp // not a Receipt literal: no temporary to copy
	}
}

// figures writes into d the figures of a hit under rule whose result is
// r: what it reports, not what Refund needs.
func (d *Decision) figures(rule *Rule, r *Result) {
	d.Allowed = r.Allowed
	d.Policy, d.Limit, d.Window = rule.Name, rule.Limit, rule.Window
	d.Remaining, d.ResetAfter, d.RetryAfter = r.Remaining, r.ResetAfter, r.RetryAfter
}

// Worse reports whether d is a worse outcome than e, as a multi-hit
// check picks the decision it reports: denied beats allowed, then the
// longer RetryAfter, then the fewer Remaining, then the longer
// ResetAfter.
func (d Decision) Worse(e Decision) bool {
	switch {
	case d.Allowed != e.Allowed:
		return !d.Allowed
	case d.RetryAfter != e.RetryAfter:
		return d.RetryAfter > e.RetryAfter
	case d.Remaining != e.Remaining:
		return d.Remaining < e.Remaining
	default:
		return d.ResetAfter > e.ResetAfter
	}
}
