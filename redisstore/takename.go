package redisstore

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// Take names
//
// The store names every Take call with a uint64 that it puts in the
// stamp of each hit the take recorded (floodgate.Stamp.Take), so that
// Refund and Renew find the take from a receipt alone. The scripts see the
// name formatted by takeID: it keys the tombstone of the take's refund
// (refund.lua, renew.lua), and the epoch of a state the take creates is a
// hash of it (epochOf).
//
// A store counts its names from a random start, so its own names never
// repeat (2^64 takes). Two stores (replicas, or one process's successive
// stores) share names only where their ranges overlap: for stores that
// make at most M takes each, two random starts overlap with a chance
// below 2M/2^64; for M = 2^32 (4 billion takes, 10,000 a second for five
// days), 2^-31 per pair of stores, 2^-12 among a thousand stores. Even
// then, a shared name weighs only when it names two takes of the same key
// under the same rule within the life of a tombstone or a state (about a
// window). And the harm is bounded: a shared tombstone makes a refund
// credit nothing (a key admits less, never more), and a shared epoch
// lets a refund credit a state that does not hold its take, which the
// 48 bits of epochOf already allow at a chance of 2^-48 per new state.

// takeNames hands out the names of a store's takes. The zero value counts
// from zero; New starts it at random (seed).
type takeNames struct {
	last atomic.Uint64 // the name given last
}

// seed starts the names at random.
func (n *takeNames) seed() {
	n.last.Store(rand.Uint64())
}

// next returns a fresh name, never zero (the name of no take).
func (n *takeNames) next() uint64 {
	for {
		if t := n.last.Add(1); t != 0 {
			return t
		}
	}
}

// takeID formats the name t for the scripts: in base 36, 1 to 13
// characters.
func takeID(t uint64) string {
	return strconv.FormatUint(t, 36)
}
