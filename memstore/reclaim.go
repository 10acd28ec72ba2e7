package memstore

// Reclaiming room in a full shard.
//
// A key whose entry has expired (entry.expires <= now) no longer weighs:
// its state answers exactly as a fresh key's would (a fixed window whose
// window ended, a token bucket refilled, a counter whose next window
// ended, a log whose times all left the window), and a take recorded
// before it can no longer be refunded (its epoch is gone with it). So a
// full shard may drop it to make room without changing any decision.
//
// To find such keys without scanning the shard, a bounded store keeps its
// entries in a min-heap per shard (shard.queue), ordered by a lower bound
// of when each stops weighing: its expiry when it entered the heap or was
// last looked at there. Takes raise an entry's expiry without touching
// the heap, which keeps the hot path as it was; the heap catches up
// lazily, when the entry reaches its head. So the head is the earliest
// candidate, and when its bound lies after now, no entry of the shard can
// be reclaimed. Each call that needs room looks at the head at most
// reclaimSteps times: each look either drops an entry that no longer
// weighs or moves one whose expiry was raised by a take since, so the
// work stays bounded per call and is paid for, overall, by the takes.

// reclaimSteps bounds the entries a check that needs room looks at.
const reclaimSteps = 16

// queued is an entry in its shard's queue, with the lower bound of its
// expiry that orders it there.
type queued struct {
	at int64
	e  *entry
}

// reclaim drops entries of the shard that no longer weigh at now, taking
// at most reclaimSteps steps, and reports whether the shard holds fewer
// than limit entries afterwards. The entries that the calling check
// created or restarted are queued after now (see enqueue), so they are
// never dropped under it. sh.mu must be held.
func (sh *shard) reclaim(now int64, limit int) bool {
	for range reclaimSteps {
		if len(sh.queue) == 0 || sh.queue[0].at > now {
			break // every entry weighs after now
		}
		e := sh.queue[0].e
		if e.expires > now {
			// A take raised its expiry since it was queued.
			sh.queue[0].at = e.expires
			sh.down(0)
			continue
		}
		sh.del(e)
	}
	return sh.entries.n < limit
}

// enqueue puts e in the queue, or moves it there, at at. An entry created
// or restarted by a check is queued at now+1: it holds nothing yet, and
// until the check records into it nothing may drop it; once recorded, it
// weighs past now (every record sets an expiry after now), and if the
// check records nothing, the check deletes it. sh.mu must be held.
func (sh *shard) enqueue(e *entry, at int64) {
	if e.queued == 0 {
		sh.queue = append(sh.queue, queued{at, e})
		e.queued = len(sh.queue)
		sh.up(len(sh.queue) - 1)
		return
	}
	i := e.queued - 1
	old := sh.queue[i].at
	sh.queue[i].at = at
	if at < old {
		sh.up(i)
	} else {
		sh.down(i)
	}
}

// dequeue takes e out of the queue, if it is in it. sh.mu must be held.
func (sh *shard) dequeue(e *entry) {
	if e.queued == 0 {
		return
	}
	i, last := e.queued-1, len(sh.queue)-1
	e.queued = 0
	if i != last {
		sh.queue[i] = sh.queue[last]
		sh.queue[i].e.queued = i + 1
	}
	sh.queue[last] = queued{} // no pointer to e left behind
	sh.queue = sh.queue[:last]
	if i != last {
		sh.down(i)
		sh.up(i)
	}
}

// up moves the queue's element i towards the head while it is earlier
// than its parent.
func (sh *shard) up(i int) {
	q := sh.queue
	for i > 0 {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			return
		}
		q[p], q[i] = q[i], q[p]
		q[p].e.queued, q[i].e.queued = p+1, i+1
		i = p
	}
}

// down moves the queue's element i away from the head while a child is
// earlier.
func (sh *shard) down(i int) {
	q := sh.queue
	for {
		c := 2*i + 1
		if c >= len(q) {
			return
		}
		if c+1 < len(q) && q[c+1].at < q[c].at {
			c++
		}
		if q[i].at <= q[c].at {
			return
		}
		q[i], q[c] = q[c], q[i]
		q[i].e.queued, q[c].e.queued = i+1, c+1
		i = c
	}
}
