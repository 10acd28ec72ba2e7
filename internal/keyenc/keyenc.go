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
// index states by it.
func Identity(seed maphash.Seed, name string, alg uint8, window time.Duration, key string) uint64 {
	h := maphash.String(seed, key) ^ (maphash.String(seed, name)+uint64(alg)+uint64(window)<<8)*0x9e3779b97f4a7c15
	return h ^ h>>29
}
