package bank

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// tallyInterval is the least time between two log lines of one tally.
const tallyInterval = 5 * time.Second

// tallyIPs bounds the client IPs a tally line names; the others are
// summed.
const tallyIPs = 16

// ipTally logs an event (a failed login, a 429) with the client IPs it
// came from, never one line per event: the first event is written at once,
// the events of the following interval are counted by IP and written as
// one line when it ends, so no count is lost and an attack writes a line
// per interval. Like httplimit's degraded-decision log. It is safe for
// concurrent use; stop writes what is held.
type ipTally struct {
	logger   *slog.Logger
	msg      string
	attrs    []slog.Attr
	interval time.Duration

	mu      sync.Mutex
	last    time.Time      // guarded by mu; when the last line was written
	counts  map[string]int // guarded by mu; events held, by client IP
	timer   *time.Timer    // guarded by mu; writes the held events when due
	stopped bool           // guarded by mu
}

func newTally(logger *slog.Logger, msg string, attrs ...slog.Attr) *ipTally {
	return &ipTally{logger: logger, msg: msg, attrs: attrs, interval: tallyInterval, counts: make(map[string]int)}
}

// add counts an event from ip ("" when unknown).
func (t *ipTally) add(ip string) {
	if ip == "" {
		ip = "unknown"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[ip]++
	now := time.Now()
	switch {
	case t.timer == nil && (t.last.IsZero() || now.Sub(t.last) >= t.interval):
		t.writeLocked(now)
	case t.timer == nil && !t.stopped:
		t.timer = time.AfterFunc(t.last.Add(t.interval).Sub(now), t.flush)
	}
}

// flush writes the held events, if any.
func (t *ipTally) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	if len(t.counts) > 0 {
		t.writeLocked(time.Now())
	}
}

// stop writes the held events and stops the timer; later events are
// written at once or held until the next stop.
func (t *ipTally) stop() {
	t.mu.Lock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
	t.mu.Unlock()
	t.flush()
}

// writeLocked writes one line for the held events: their count and the
// count per client IP, the busiest first, at most tallyIPs of them.
func (t *ipTally) writeLocked(now time.Time) {
	ips := make([]string, 0, len(t.counts))
	total := 0
	for ip, n := range t.counts {
		ips = append(ips, ip)
		total += n
	}
	sort.Slice(ips, func(i, j int) bool {
		if t.counts[ips[i]] != t.counts[ips[j]] {
			return t.counts[ips[i]] > t.counts[ips[j]]
		}
		return ips[i] < ips[j]
	})
	var byIP []any
	others := 0
	for i, ip := range ips {
		if i < tallyIPs {
			byIP = append(byIP, slog.Int(ip, t.counts[ip]))
		} else {
			others += t.counts[ip]
		}
	}
	attrs := append(append([]slog.Attr(nil), t.attrs...), slog.Int("count", total), slog.Group("by_ip", byIP...))
	if others > 0 {
		attrs = append(attrs, slog.Int("other_ips", len(ips)-tallyIPs), slog.Int("other_count", others))
	}
	t.logger.LogAttrs(context.Background(), slog.LevelInfo, t.msg, attrs...)
	t.last = now
	clear(t.counts)
}
