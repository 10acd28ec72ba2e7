// Package redisopt builds the rueidis client options that every floodgate
// package dialing Redis from a URL uses: the store (redisstore) and the
// overrides table (overrides).
package redisopt

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// FromURL returns the client options of u (rueidis's URL forms:
// redis://, rediss://, unix://, ?addr= for more seeds, ?master_set= for
// Sentinel, and floodgate's own for TLS files and the sentinels'
// credentials: see tls.go) with the client-side cache off (servers such as miniredis and
// some managed Redis refuse it) and a dial timeout: dial if positive, else
// the URL's own, else def. Its error never quotes the URL's password (a
// parse error quotes the URL whole), so that it may be printed and logged.
func FromURL(u string, dial, def time.Duration) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		return rueidis.ClientOption{}, parseError(u, err)
	}
	if err := extras(u, &opt); err != nil {
		return rueidis.ClientOption{}, errors.New(Redact(err.Error(), u))
	}
	opt.DisableCache = true
	if dial > 0 {
		opt.Dialer.Timeout = dial
	} else if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = def
	}
	return opt, nil
}

// parseError returns err, the error of parsing u, without u's password.
// A URL whose password holds an unescaped / ? # or % does not parse, and
// the parser then quotes pieces of the password on their own (as a port,
// or an escape) and the URL cut where it stopped reading (at a #), which
// no search for the password finds. So it quotes u with everything before
// its last @ (user and password, as far as they can be told apart)
// replaced by xxxxx, and the parser's reason with every quoted piece of
// that part replaced too.
func parseError(u string, err error) error {
	scheme, rest, ok := strings.Cut(u, "://")
	at := strings.LastIndex(rest, "@")
	var ue *url.Error
	if !ok || at < 0 || !errors.As(err, &ue) {
		return errors.New(Redact(err.Error(), u))
	}
	return errors.New(redactQueryPassword(fmt.Sprintf("%s %q: %s", ue.Op, scheme+"://xxxxx"+rest[at:], redactQuoted(ue.Err.Error(), rest[:at])), u))
}

// redactQuoted returns msg with each of its quoted strings (as %q writes
// them) that shares a piece with secret replaced by "xxxxx".
func redactQuoted(msg, secret string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		q, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			break
		}
		b.WriteString(msg[:i])
		if s, err := strconv.Unquote(q); err != nil || overlaps(s, secret) {
			b.WriteString(`"xxxxx"`)
		} else {
			b.WriteString(q)
		}
		msg = msg[i+len(q):]
	}
	b.WriteString(msg)
	return b.String()
}

// overlaps reports whether s is a piece of secret, or begins with its end
// or ends with its start (a piece read across its edge).
func overlaps(s, secret string) bool {
	if s == "" || secret == "" {
		return false
	}
	if strings.Contains(secret, s) {
		return true
	}
	for n := 1; n < len(s); n++ {
		if strings.HasSuffix(secret, s[:n]) || strings.HasPrefix(secret, s[len(s)-n:]) {
			return true
		}
	}
	return false
}

// Redact returns msg with the password of each of the URLs, as written,
// as unescaped and as %q escapes them, replaced by "xxxxx". It reads the
// password as a URL's userinfo even when the URL does not parse, and in
// envoyproxy/ratelimit's forms without a scheme too:
// USER:PASSWORD@HOST:PORT and PASSWORD@HOST:PORT. The value of a
// sentinel_password query parameter is replaced too.
func Redact(msg string, urls ...string) string {
	for _, u := range urls {
		msg = redactQueryPassword(msg, u)
		_, rest, scheme := strings.Cut(u, "://")
		if !scheme {
			rest = u
		}
		i := strings.LastIndex(rest, "@")
		if i < 0 {
			continue
		}
		user, pass, ok := strings.Cut(rest[:i], ":")
		if !ok && !scheme {
			pass = user // PASSWORD@HOST:PORT
		}
		forms := []string{pass}
		if p, err := url.PathUnescape(pass); err == nil {
			forms = append(forms, p)
		}
		for _, f := range forms {
			if q := strconv.Quote(f); q[1:len(q)-1] != f {
				forms = append(forms, q[1:len(q)-1]) // a control byte as \x01
			}
		}
		for _, f := range forms {
			if f != "" {
				msg = strings.ReplaceAll(msg, f, "xxxxx")
			}
		}
	}
	return msg
}

// redactQueryPassword returns msg with the sentinel_password value of u,
// as written and unescaped, replaced by "xxxxx". It finds the value
// without parsing u, which may not parse.
func redactQueryPassword(msg, u string) string {
	_, q, ok := strings.Cut(u, "?")
	if !ok {
		return msg
	}
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == '#' }) {
		k, v, _ := strings.Cut(kv, "=")
		if k != ParamSentinelPassword || v == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, v, "xxxxx")
		if p, err := url.QueryUnescape(v); err == nil && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}
