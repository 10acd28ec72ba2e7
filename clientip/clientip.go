package clientip

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// ErrInvalidOptions is wrapped by every error that [New] returns; check
// with [errors.Is].
var ErrInvalidOptions = errors.New("clientip: invalid options")

// Options configures a [Resolver]. The zero value trusts no proxy: every
// client is its RemoteAddr.
type Options struct {
	// TrustedProxies lists the proxies whose forwarding headers are believed,
	// as CIDR prefixes ("192.0.2.0/24", "2001:db8:ffff::/48") or single
	// addresses ("192.0.2.1"). Surrounding spaces and host bits are ignored
	// ("192.0.2.7/24" means 192.0.2.0/24), zones are dropped, and IPv4-mapped
	// entries mean their IPv4 form ("::ffff:192.0.2.0/120" is 192.0.2.0/24).
	// Empty means no header is ever read.
	TrustedProxies []string

	// IPv6Prefix is how many leading bits of an IPv6 client make its key.
	// Zero means 64: 2001:db8:1:2::a and 2001:db8:1:2::b share the key
	// "2001:db8:1:2::/64". 48 groups a whole site ("2001:db8:1::/48"); 128
	// keys every address on its own ("2001:db8:1:2::a"). Valid: 0 to 128.
	IPv6Prefix int

	// Headers names the forwarding headers read from a trusted peer, in order
	// of preference; the first one that yields an address wins. Nil means
	// {"X-Forwarded-For"}; an empty non-nil list reads none.
	// "Forwarded" is parsed as RFC 7239; any other name as a comma-separated
	// address list like X-Forwarded-For, which also fits single-address
	// headers such as X-Real-IP. List only headers your proxies write (see
	// "Choosing headers" in the package doc).
	Headers []string
}

// Resolver finds the client address of a request. Build it with [New]; it is
// safe for concurrent use and never changes after New.
//
// The zero Resolver trusts no proxy and keys IPv6 clients by /64.
type Resolver struct {
	trusted  []netip.Prefix
	headers  []header
	ipv6Bits int // 0 means 64
}

type header struct {
	name      string // canonical
	forwarded bool   // RFC 7239 syntax, not an address list
}

// New returns a Resolver for o, or an error listing every invalid field,
// wrapping [ErrInvalidOptions].
func New(o Options) (*Resolver, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	r := &Resolver{ipv6Bits: o.IPv6Prefix}
	for i, s := range o.TrustedProxies {
		p, ok := parsePrefix(s)
		if !ok {
			bad("TrustedProxies[%d] %q is not an IP address or CIDR prefix", i, s)
			continue
		}
		r.trusted = append(r.trusted, p)
	}
	if o.IPv6Prefix < 0 || o.IPv6Prefix > 128 {
		bad("IPv6Prefix %d is out of range (want 0 to 128; 0 means 64)", o.IPv6Prefix)
	}
	names := o.Headers
	if names == nil {
		names = []string{"X-Forwarded-For"}
	}
	for i, name := range names {
		if !isToken(name) {
			bad("Headers[%d] %q is not a header name", i, name)
			continue
		}
		name = http.CanonicalHeaderKey(name)
		r.headers = append(r.headers, header{name, name == "Forwarded"})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// ClientIP returns the address of the client that sent req, unmapped and
// without zone: the peer (req.RemoteAddr) unless the peer is a trusted proxy,
// in which case the forwarding headers are walked as the package doc
// describes. It returns the zero [netip.Addr] if req or its RemoteAddr
// holds no address.
func (r *Resolver) ClientIP(req *http.Request) netip.Addr {
	if req == nil {
		return netip.Addr{}
	}
	peer := parseNode(req.RemoteAddr)
	if !peer.IsValid() || !r.isTrusted(peer) {
		return peer
	}
	for _, h := range r.headers {
		if client := r.walk(h.hops(req.Header[h.name])); client.IsValid() {
			return client
		}
	}
	return peer
}

// Key returns the rate-limit key of the client that sent req: its IPv4
// address as text ("203.0.113.9") or its IPv6 prefix ("2001:db8:1:2::/64", see
// [Options.IPv6Prefix]). It returns "" when [Resolver.ClientIP] finds no
// address; callers must treat "" as an unknown client, not as a key.
func (r *Resolver) Key(req *http.Request) string {
	a, bits := r.ClientIP(req), cmp.Or(r.ipv6Bits, 64)
	switch {
	case !a.IsValid():
		return ""
	case a.Is4() || bits == 128:
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// Headers returns the canonical names of the forwarding headers that r
// reads from a trusted peer, in order of preference: for a transport that
// carries them under other names, such as gRPC metadata, whose keys are
// lower case.
func (r *Resolver) Headers() []string {
	names := make([]string, len(r.headers))
	for i, h := range r.headers {
		names[i] = h.name
	}
	return names
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk returns the client named by hops, the entries of one header from left
// to right, or the zero Addr if the rightmost entry is not an address.
//
// It computes the right-to-left walk in one left-to-right pass, without
// collecting the entries: client is the answer for the entries seen so far.
// An unreadable entry hides everything left of it; an untrusted address
// answers for itself; a trusted one is skipped unless nothing left of it
// answers.
func (r *Resolver) walk(hops iter.Seq[string]) netip.Addr {
	var client netip.Addr
	for hop := range hops {
		a := parseNode(hop)
		if !a.IsValid() || !r.isTrusted(a) || !client.IsValid() {
			client = a
		}
	}
	return client
}

// hops yields the entries of all the header's lines in order: each non-empty
// list element, or for Forwarded each element's for= value ("" when the
// element has none or has two).
func (h header) hops(lines []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, line := range lines {
			if !h.forwarded {
				for hop := range strings.SplitSeq(line, ",") {
					if hop = strings.TrimSpace(hop); hop != "" && !yield(hop) {
						return
					}
				}
				continue
			}
			// Lines are split separately so that an open quote in one line,
			// perhaps written by the client, cannot swallow the next.
			for elem := range splitQuoted(line, ',') {
				if strings.TrimSpace(elem) != "" && !yield(forwardedFor(elem)) {
					return
				}
			}
		}
	}
}

// forwardedFor returns the unquoted for= value of an RFC 7239 element such as
// `for="[2001:db8::1]:4711";proto=https`.
func forwardedFor(elem string) string {
	node, found := "", false
	for pair := range splitQuoted(elem, ';') {
		k, v, _ := strings.Cut(pair, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		if found {
			return "" // a parameter must not repeat (RFC 7239 §4)
		}
		node, found = unquote(strings.TrimSpace(v)), true
	}
	return node
}

// splitQuoted splits s at each sep outside a quoted-string.
func splitQuoted(s string, sep byte) iter.Seq[string] {
	return func(yield func(string) bool) {
		start, quoted := 0, false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\' && quoted:
				i++
			case c == '"':
				quoted = !quoted
			case c == sep && !quoted:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(s[start:])
	}
}

// unquote returns a token as is and the content of a quoted-string, or "" if
// the quoted-string is malformed.
func unquote(s string) string {
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	if !strings.Contains(s, `\`) { // no quoted-pairs: no copy
		if len(s) < 2 || strings.IndexByte(s[1:], '"') != len(s)-2 {
			return ""
		}
		return s[1 : len(s)-1]
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i++; i < len(s) {
				b.WriteByte(s[i])
			}
		case '"':
			if i != len(s)-1 {
				return ""
			}
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return "" // unterminated
}

// parseNode parses an address with an optional port, as found in RemoteAddr,
// X-Forwarded-For and Forwarded: "192.0.2.1", "192.0.2.1:80", "2001:db8::1",
// "[2001:db8::1]", "[2001:db8::1]:80", "192.0.2.1:_port". The result is
// unmapped and zone-free, or the zero Addr.
func parseNode(s string) netip.Addr {
	host := strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(host, "["); ok {
		h, port, ok := strings.Cut(rest, "]")
		if !ok {
			return netip.Addr{}
		}
		if port != "" {
			if port, ok = strings.CutPrefix(port, ":"); !ok || !isPort(port) {
				return netip.Addr{}
			}
		}
		host = h
	} else if i := strings.IndexByte(host, ':'); i >= 0 && i == strings.LastIndexByte(host, ':') {
		// One colon: IPv4 and port. IPv6 has at least two.
		if !isPort(host[i+1:]) {
			return netip.Addr{}
		}
		host = host[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// isPort reports whether s is a port number or an RFC 7239 obfuscated port
// ("_abc").
func isPort(s string) bool {
	if obf, ok := strings.CutPrefix(s, "_"); ok {
		return obf != "" && strings.Trim(obf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
	}
	_, err := strconv.ParseUint(s, 10, 16)
	return err == nil
}

// parsePrefix parses a TrustedProxies entry into a masked prefix, IPv4 for
// IPv4-mapped entries.
func parsePrefix(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, false
		}
		a = a.WithZone("")
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header name.
func isToken(s string) bool {
	const tchar = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	return s != "" && strings.Trim(s, tchar) == ""
}
