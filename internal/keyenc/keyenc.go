// Package keyenc turns client-supplied limit keys into short, safe store
// keys.
package keyenc

import (
	"crypto/sha256"
	"encoding/base64"
	"hash/maphash"
	"time"
)

// MaxPlain is the longest key kept as it is.
const MaxPlain = 48

// Encode returns key unchanged when it is at most MaxPlain bytes of
// [A-Za-z0-9_.@+=:/-]. Any other key becomes "~" followed by the unpadded
// base64url of the first 18 bytes of its SHA-256 (25 bytes in all). Since
// "~" is never kept plain, the encoding is injective up to digest
// collisions, and no key can bring braces (Redis Cluster hash tags),
// separators, control bytes, invalid UTF-8 or megabytes into a store key.
func Encode(key string) string {
	if len(key) <= MaxPlain && plain(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

func plain(key string) bool {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == '@' || c == '+' || c == '=' || c == '-' || c == ':' || c == '/') {
			return false
		}
	}
	return key != ""
}

// Identity hashes a state's identity (floodgate.Store): a rule's name,
// algorithm and window, and a key. The denial cache and memstore both
// index states by it. Only the key, which clients choose, goes through
// the seeded hash; the rule, which the configuration names, is mixed in
// by nameHash, which costs a decision far less than a second seeded hash.
func Identity(seed maphash.Seed, name string, alg uint8, window time.Duration, key string) uint64 {
	return KeyIdentity(seed, RuleIdentity(name, alg, window), key)
}

// RuleIdentity is the part of Identity that a rule's name, algorithm and
// window make, which a caller that decides many keys under one rule
// computes once.
func RuleIdentity(name string, alg uint8, window time.Duration) uint64 {
	return (nameHash(name) + uint64(alg) + uint64(window)<<8) * 0x9e3779b97f4a7c15
}

// KeyIdentity is Identity of key under the rule whose RuleIdentity is
// rule.
func KeyIdentity(seed maphash.Seed, rule uint64, key string) uint64 {
	h := maphash.Comparable(seed, key) ^ rule
	return h ^ h>>29
}

// nameHash mixes a rule's name (at most 64 bytes), eight bytes at a time.
// It is not seeded: names come from the configuration, not from clients,
// and two names that happened to mix alike would only give their keys'
// states one hash in memstore's table, or share a slot of the denial
// cache's generations, never merge them (both compare the full identity).
func nameHash(name string) uint64 {
	const k = 0x9e3779b97f4a7c15
	h := uint64(len(name))
	for ; len(name) >= 8; name = name[8:] {
		_ = name[7]
		w := uint64(name[0]) | uint64(name[1])<<8 | uint64(name[2])<<16 | uint64(name[3])<<24 |
			uint64(name[4])<<32 | uint64(name[5])<<40 | uint64(name[6])<<48 | uint64(name[7])<<56
		h = (h ^ w) * k
		h ^= h >> 29
	}
	// The last 0 to 7 bytes, four, two and one at a time.
	var w uint64
	if len(name) >= 4 {
		_ = name[3]
		w = uint64(name[0]) | uint64(name[1])<<8 | uint64(name[2])<<16 | uint64(name[3])<<24
		name = name[4:]
	}
	if len(name) >= 2 {
		_ = name[1]
		w = w<<16 | uint64(name[0]) | uint64(name[1])<<8
		name = name[2:]
	}
	if len(name) == 1 {
		w = w<<8 | uint64(name[0])
	}
	h = (h ^ w) * k
	return h ^ h>>32
}
