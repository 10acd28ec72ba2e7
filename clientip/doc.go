// Package clientip finds the address of the client behind an HTTP request and
// turns it into a rate-limit key, believing forwarding headers only when they
// come from a proxy you trust.
//
// Build one [Resolver] with [New] and share it; it is safe for concurrent use.
//
//	res, err := clientip.New(clientip.Options{
//		TrustedProxies: []string{"192.0.2.0/24", "2001:db8:ffff::/48"},
//	})
//	...
//	ip := res.ClientIP(r)  // 203.0.113.9
//	key := res.Key(r)      // "203.0.113.9", or "2001:db8:1:2::/64" for IPv6
//
// # Trust
//
// The request's peer (r.RemoteAddr) is the only address nobody can forge. If
// the peer is not in [Options.TrustedProxies], it is the client and every
// header is ignored: a client that sends X-Forwarded-For gets the same key as
// without it.
//
// If the peer is trusted, the resolver reads the forwarding header
// (see [Options.Headers]), merging all its header lines in order and all the
// comma-separated entries in each, and walks the entries from right to left,
// each one the address that the proxy on its right saw:
//
//   - a trusted address is skipped;
//   - the first untrusted address is the client;
//   - if every address is trusted, the leftmost one is the client;
//   - an entry that is not an address (garbage, "unknown", an obfuscated
//     identifier such as "_hidden", an RFC 7239 element without for=) stops the
//     walk, and the client is the address just right of it: the last proxy
//     that could still tell who it was talking to. The resolver never moves
//     further left than an entry it cannot read.
//
// A client cannot choose its key by prepending addresses: whatever it writes
// sits left of the entry its first trusted proxy appended, so the leftmost
// value is never believed unless every address after it is trusted.
// X-Real-IP and True-Client-IP are ignored unless listed in [Options.Headers].
//
// # Choosing headers
//
// By default the resolver reads only X-Forwarded-For, the header that
// nearly every proxy appends to. A header your proxies pass through
// untouched is written by the client: most proxies forward Forwarded
// (RFC 7239) as they got it, so reading it by default would let a client
// choose its key. If your proxies write Forwarded, list it; headers are
// tried in order, a header counts when its rightmost element is an
// address, and if none yields one, the client is the peer:
//
//	clientip.Options{TrustedProxies: cidrs, Headers: []string{"Forwarded", "X-Forwarded-For"}}
//
// A header that the proxy overwrites with one address (X-Real-IP,
// True-Client-IP, CF-Connecting-IP) is read like X-Forwarded-For, so listing it
// alone makes it the only source.
//
// # Addresses and keys
//
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are unmapped and zones
// (fe80::1%eth0) dropped before any check, for the peer, every header entry
// and every trusted prefix. Entries may carry ports: "192.0.2.1:1234",
// "[2001:db8::1]:80", and in Forwarded the quoted "[2001:db8::1]:4711".
//
// [Resolver.Key] is the IPv4 address as text, or for IPv6 the client's prefix
// of [Options.IPv6Prefix] bits (64 by default), because one subscriber usually
// holds a whole /64 and could otherwise rotate through 2^64 keys.
//
// If r.RemoteAddr is not an address (a Unix socket, a test that left it
// empty), [Resolver.ClientIP] returns the zero [netip.Addr] and [Resolver.Key]
// returns "". Callers must treat "" as "unknown client", for example by
// sending every such request to one shared bucket or rejecting it, and never
// as a key of its own that bypasses limits.
package clientip
