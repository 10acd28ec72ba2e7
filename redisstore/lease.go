package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
)

var (
	//go:embed renew.lua
	renewBody string
	// renewScript moves entries, so it is not retried: a renewal whose
	// answer is lost is safe to make again with the older stamp (see
	// floodgate.Store.Renew), but that is the caller's choice.
	renewScript = newScript(ringLua+rewriteLua+renewBody, false)
)

// Renew implements [floodgate.Store] with one script call (one per slot
// on a Cluster, concurrently): renew.lua moves each lease's entries in
// its ring to the server's time, if they still hold their slots, and
// never renews a lease whose refund's tombstone (named by the receipt's
// Stamp.Take) exists.
func (s *Store) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	return s.guard().Renew(ctx, receipts)
}

func (d direct) Renew(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	return d.s.renewDirect(ctx, receipts)
}

func (s *Store) renewDirect(ctx context.Context, receipts []floodgate.Receipt) ([]floodgate.Stamp, error) {
	out := make([]floodgate.Stamp, len(receipts))
	// Only leases are renewed: the other receipts keep the zero Stamp.
	var leases []floodgate.Receipt
	var at []int
	for i, r := range receipts {
		if r.Hit.Rule.Algorithm == floodgate.Concurrency {
			leases = append(leases, r)
			at = append(at, i)
		}
	}
	if len(leases) == 0 {
		return out, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	hits := make([]floodgate.Hit, len(leases))
	for i, r := range leases {
		hits[i] = r.Hit
	}
	var stamps []floodgate.Stamp
	var err error
	if groups := s.slotGroups(hits); groups != nil {
		stamps, err = s.renewSlots(ctx, leases, groups)
	} else {
		stamps, err = s.renew(ctx, leases)
		if errors.Is(err, errCrossSlot) { // see Take
			if groups := s.slotGroups(hits); groups != nil {
				stamps, err = s.renewSlots(ctx, leases, groups)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = stamps[j]
	}
	return out, nil
}

// renew runs the renew script for leases of one slot.
func (s *Store) renew(ctx context.Context, leases []floodgate.Receipt) ([]floodgate.Stamp, error) {
	keys := make([]string, 0, 2*len(leases))
	args := make([]string, 0, 4*len(leases))
	for i, r := range leases {
		p, err := params(r.Hit)
		if err != nil {
			return nil, fmt.Errorf("redisstore: renew: lease %d: %w", i, err)
		}
		tag := s.tag(r.Hit.Rule.Name, r.Hit.Key)
		keys = append(keys, tag+p.suffix, rediskeys.Tombstone(tag, p.suffix, takeID(r.Stamp.Take)))
		at := max(0, min(r.Stamp.At.UnixMicro(), maxServerTime)) // a zero stamp renews nothing
		args = append(args, strconv.FormatInt(p.cost, 10), strconv.FormatInt(p.b, 10),
			strconv.FormatInt(at, 10), strconv.FormatUint(r.Stamp.Epoch, 10))
	}
	v, err := s.eval(ctx, renewScript, keys, args)
	if err != nil {
		return nil, err
	}
	if len(v) != len(leases) {
		return nil, fmt.Errorf("redisstore: renew: %w: %w: %d values for %d leases", floodgate.ErrStoreUnavailable, errMalformed, len(v), len(leases))
	}
	out := make([]floodgate.Stamp, len(leases))
	for i, t := range v {
		switch {
		case t < 0 || t > maxServerTime:
			return nil, fmt.Errorf("redisstore: renew: %w: %w: lease %d: time %dµs", floodgate.ErrStoreUnavailable, errMalformed, i, t)
		case t > 0:
			out[i] = floodgate.Stamp{At: time.UnixMicro(t), Epoch: leases[i].Stamp.Epoch, Take: leases[i].Stamp.Take}
		}
	}
	return out, nil
}

// renewSlots renews each slot's leases concurrently.
func (s *Store) renewSlots(ctx context.Context, leases []floodgate.Receipt, groups []slotGroup) ([]floodgate.Stamp, error) {
	out := make([]floodgate.Stamp, len(leases))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		rs := make([]floodgate.Receipt, len(g.idx))
		for j, k := range g.idx {
			rs[j] = leases[k]
		}
		wg.Go(func() {
			st, err := s.renew(ctx, rs)
			if err != nil {
				errs[i] = err
				return
			}
			for j, k := range g.idx {
				out[k] = st[j]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
