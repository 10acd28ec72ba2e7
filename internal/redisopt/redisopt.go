// Package redisopt builds the rueidis client options that every floodgate
// package dialing Redis from a URL uses: the store (redisstore) and the
// overrides table (overrides).
package redisopt

import (
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// FromURL returns the client options of u (rueidis's URL forms:
// redis://, rediss://, unix://, ?addr= for more seeds, ?master_set= for
// Sentinel) with the client-side cache off (servers such as miniredis and
// some managed Redis refuse it) and a dial timeout: dial if positive, else
// the URL's own, else def. Its error never quotes the URL's password (a
// parse error quotes the URL whole), so that it may be printed and logged.
func FromURL(u string, dial, def time.Duration) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(u)
	if err != nil {
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

// Redact returns msg with the password of each of the URLs, as written and
// as unescaped, replaced by "xxxxx". It reads the password as a URL's
// userinfo even when the URL does not parse.
func Redact(msg string, urls ...string) string {
	for _, u := range urls {
		_, rest, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		i := strings.LastIndex(rest, "@")
		if i < 0 {
			continue
		}
		_, pass, _ := strings.Cut(rest[:i], ":")
		forms := []string{pass}
		if p, err := url.PathUnescape(pass); err == nil {
			forms = append(forms, p)
		}
		for _, f := range forms {
			if f != "" {
				msg = strings.ReplaceAll(msg, f, "xxxxx")
			}
		}
	}
	return msg
}
