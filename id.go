package floodgate

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Take identifiers
//
// Every Take gets an id unique to it, which a store records (a sliding
// window's member) and Refund names: a random base per Limiter (12
// characters of base64url, so that the ids of replicas never collide)
// followed by a sequence number in base 64 (the same alphabet).
//
// Ids are carved out of chunks of idChunkSize bytes, one chunk per P
// through a sync.Pool, so that a decision allocates no string of its own:
// one chunk serves about a hundred ids. A chunk stays in memory as long as
// any id carved from it does (a memstore sliding-window entry holds its
// ids until they leave the window), so it is kept small. Each P also
// reserves sequence numbers in blocks of idBlock, so that ids do not
// contend on one counter; ids are unique, not ordered.

const (
	idChunkSize = 2048
	idBlock     = 256
	maxIDLen    = 12 + 11 // base, and a uint64 in base 64
)

type ids struct {
	base string
	seq  atomic.Uint64 // the next block of sequence numbers starts here
	pool sync.Pool     // of *idChunk
}

type idChunk struct {
	buf       []byte // ids live in buf[:len(buf)], never written again
	next, end uint64 // sequence numbers reserved for this chunk
}

func (g *ids) init() {
	var seed [9]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
	g.base = base64.RawURLEncoding.EncodeToString(seed[:])
}

// seqDigits are the digits of sequence numbers: base64url, 6 bits each.
const seqDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// appendSeq appends n in base 64, most significant digit first, with no
// leading zeros (shifts are cheaper than strconv's divisions).
func appendSeq(b []byte, n uint64) []byte {
	var d [11]byte
	i := len(d)
	for {
		i--
		d[i] = seqDigits[n&63]
		n >>= 6
		if n == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// next returns a fresh id.
func (g *ids) next() string {
	c, _ := g.pool.Get().(*idChunk)
	if c == nil {
		c = new(idChunk)
	}
	if c.next == c.end {
		c.end = g.seq.Add(idBlock) + 1
		c.next = c.end - idBlock
	}
	if cap(c.buf)-len(c.buf) < maxIDLen {
		c.buf = make([]byte, 0, idChunkSize)
	}
	start := len(c.buf)
	c.buf = append(c.buf, g.base...)
	c.buf = appendSeq(c.buf, c.next)
	c.next++
	// The bytes of buf[start:] are never written again: later ids are
	// appended past them, and a full chunk is replaced, not reused.
	id := unsafe.String(&c.buf[start], len(c.buf)-start)
	g.pool.Put(c)
	return id
}
