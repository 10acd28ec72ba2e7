// Package redisopt builds the rueidis client options that every floodgate
// package dialing Redis from a URL uses: the store (redisstore) and the
// overrides table (overrides).
package redisopt

import (
	"time"

	"github.com/redis/rueidis"
)

// FromURL returns the client options of url (rueidis's URL forms:
// redis://, rediss://, unix://, ?addr= for more seeds, ?master_set= for
// Sentinel) with the client-side cache off (servers such as miniredis and
// some managed Redis refuse it) and a dial timeout: dial if positive, else
// the URL's own, else def.
func FromURL(url string, dial, def time.Duration) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return opt, err
	}
	opt.DisableCache = true
	if dial > 0 {
		opt.Dialer.Timeout = dial
	} else if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = def
	}
	return opt, nil
}
