package enforce

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fields"
)

// Hold holds the leases of the request, its hits of floodgate.Concurrency
// rules, while it runs: it renews each every third of its time to live
// until release is called, and release stops the renewals (waiting for
// one under way) and releases the leases, once however often it is
// called. The caller must call release when the work ends, typically
// deferred: the renewals ignore ctx's cancellation (a handler may run on
// after its client left) and use only its values. httplimit calls it for
// a request until its handler returns, grpclimit for a call until its
// handler returns (a stream: until it ends), so no renewal outlives its
// holder. A shadow limit's lease (recorded when within its limit) is held
// and released alike. Without leases, Hold does nothing and allocates
// nothing.
//
// A renewal that finds its lease gone (its time to live ran out before
// it, a holder stalled longer than that; or the key was reset, floodgate
// reset) stops renewing it and counts it
// in floodgate_lease_renewals_failed_total and
// floodgate_leases_expired_total; one whose store call fails is counted
// as failed and tried again at the next third, the lease holding its slot
// meanwhile until its time to live runs out. floodgate_leases_held counts
// the leases held from this process, and a release after a lease's time
// to live ran out unrenewed counts it expired too. The lease of a holder
// that dies is released by its time to live alone, which no surviving
// process sees.
func (r Result) Hold(ctx context.Context) (release func()) {
	if r.gate == nil {
		return noRelease
	}
	var h *holding
	add := func(l *floodgate.Limiter, hit floodgate.Hit, d floodgate.Decision) {
		if hit.Rule.Algorithm != floodgate.Concurrency || !d.Recorded {
			return
		}
		if h == nil {
			h = &holding{ctx: context.WithoutCancel(ctx), g: r.gate, period: hit.Rule.Window / 3}
		}
		h.period = min(h.period, hit.Rule.Window/3)
		ls := lease{limiter: l, d: d, ttl: hit.Rule.Window, renewed: time.Now(), m: r.gate.m.lease(d.Policy)}
		ls.m.held.Inc()
		h.leases = append(h.leases, ls)
	}
	for _, v := range r.Each {
		switch {
		case !v.decided():
		case v.cls&enforcedTake != 0 && r.limiter != nil:
			add(r.limiter, v.Hit, v.Decision)
		case v.cls&shadowTake != 0:
			add(r.gate.e.limiter, v.Hit, v.Decision) // a shadow limit's lease, recorded on its own
		}
	}
	if h == nil {
		return noRelease
	}
	h.period = max(h.period, time.Millisecond)
	h.mu.Lock() // the first renewal waits for its timer to be set
	h.timer = time.AfterFunc(h.period, h.renew)
	h.mu.Unlock()
	return h.release
}

func noRelease() {}

// holding is the leases of one request and their renewals.
type holding struct {
	ctx    context.Context
	g      *Gate
	period time.Duration

	mu      sync.Mutex // held through a renewal, so that release waits for it
	timer   *time.Timer
	leases  []lease // guarded by mu
	stopped bool    // guarded by mu: released
}

// lease is one lease of a holding.
type lease struct {
	limiter *floodgate.Limiter // the limiter that took it
	d       floodgate.Decision // as last renewed
	ttl     time.Duration
	renewed time.Time // when the store last confirmed it (the local clock)
	lost    bool      // a renewal found it gone: no more renewals
	m       *leaseMetrics
}

// renew renews the leases that still hold, then schedules the next
// renewal, unless the holding was released.
func (h *holding) renew() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	for i := range h.leases {
		l := &h.leases[i]
		if l.lost {
			continue
		}
		sent := time.Now()
		d, err := l.limiter.Renew(h.ctx, l.d)
		switch {
		case err != nil:
			// It may have been made: keeping the older stamp is safe
			// (floodgate.Store.Renew).
			l.m.renewalsFailed.Inc()
			h.g.m.storeError(err)
		case !d.Allowed:
			l.lost = true
			l.m.renewalsFailed.Inc()
			l.m.expired.Inc()
		default:
			l.d, l.renewed = d, sent
		}
	}
	h.timer.Reset(h.period)
}

// release stops the renewals and releases the leases, once.
func (h *holding) release() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.timer.Stop()
	leases := h.leases
	h.mu.Unlock()
	for _, l := range leases {
		l.m.held.Dec()
		if l.lost {
			continue
		}
		if time.Since(l.renewed) >= l.ttl {
			l.m.expired.Inc() // its refund credits nothing
			continue
		}
		if err := l.limiter.Refund(h.ctx, l.d); err != nil {
			h.g.m.storeError(err) // the lease frees when its time to live runs out
		}
	}
	h.g.e.released.broadcast()
}

// broadcast wakes every request that waits for a lease to be released
// in this process (a throttling gate's).
type broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed by the next release; nil until someone waits
}

// wait returns a channel closed by the next release.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) broadcast() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// leaseDenied reports whether res, the decision on hits, is a denial by
// concurrency limits alone: a slot frees when a holder releases it, at no
// time the store can tell (its RetryAfter is when the oldest lease's time
// to live runs out, the latest a slot frees). A Local decision is on the
// FailLocal hits alone.
func leaseDenied(res Result, hits []Hit) bool {
	if res.Decision.Allowed || res.limiter == nil {
		return false
	}
	each, k := fields.Each(res.Decision), 0
	for _, h := range hits {
		if res.Outcome == Local && h.Failure != FailLocal {
			continue
		}
		if k < len(each) && !each[k].Allowed && h.Rule.Algorithm != floodgate.Concurrency {
			return false
		}
		k++
	}
	for ; k < len(each); k++ {
		if !each[k].Allowed {
			return false
		}
	}
	return true
}

// leasePoll is how long a request throttled by a concurrency limit waits
// at most between two checks, for a slot released by another process: an
// eighth of MaxDelay, within 10ms and 250ms. A release in this process
// wakes it at once.
func leasePoll(maxDelay time.Duration) time.Duration {
	return min(max(maxDelay/8, 10*time.Millisecond), 250*time.Millisecond)
}
