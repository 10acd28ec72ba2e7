package floodgate

import (
	"context"
	"fmt"
	"slices"
)

// Renew extends the leases that d holds, its hits of [Concurrency] rules,
// by their time to live from now, and returns d with their new stamps:
// the decision to Renew or Refund next, in place of d. Its Allowed (and
// that of the lease's element of Each) is false when a lease no longer
// held its slot at the store: released, reset, or past its time to live,
// when the slot may already be another holder's. That lease is not
// renewed, since a renewal never takes a slot back ([Store.Renew]). A
// decision that holds no lease is returned as it is.
//
// On an error, the renewal may or may not have been made, and the
// returned decision is d: passing it to Renew or Refund later is safe
// (the store's log may then count the lease until its newer time to live
// runs out, never less).
func (l *Limiter) Renew(ctx context.Context, d Decision) (Decision, error) {
	if !d.ticket.taken {
		return d, nil
	}
	receipts := d.ticket.receipts
	if receipts == nil {
		receipts = []Receipt{d.ticket.one}
	}
	var leases []Receipt
	var at []int // the index of each lease among receipts
	for i, r := range receipts {
		if r.Hit.Rule.Algorithm == Concurrency {
			leases = append(leases, r)
			at = append(at, i)
		}
	}
	if len(leases) == 0 {
		return d, nil
	}
	ctx, cancel := l.budget(ctx)
	defer cancel()
	stamps, err := l.store.Renew(ctx, leases)
	if err != nil {
		return d, storeError("renew", err)
	}
	if len(stamps) != len(leases) {
		return d, storeError("renew", fmt.Errorf("store returned %d stamps for %d leases", len(stamps), len(leases)))
	}
	out := d
	if d.ticket.receipts != nil {
		out.ticket.receipts = slices.Clone(d.ticket.receipts)
		out.Each = slices.Clone(d.Each)
	}
	for j, i := range at {
		if stamps[j].Epoch == 0 {
			out.Allowed = false
			if out.Each != nil {
				out.Each[i].Allowed = false
			}
			continue
		}
		if out.ticket.receipts == nil {
			out.ticket.one.Stamp = stamps[j]
			continue
		}
		out.ticket.receipts[i].Stamp = stamps[j]
		out.Each[i].ticket.one.Stamp = stamps[j]
	}
	return out, nil
}
