package overridetable

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// ErrInvalidEntry is overrides.ErrInvalidEntry, which documents it.
var ErrInvalidEntry = errors.New("overrides: invalid entry")

// Entry is overrides.Entry, which documents it: the two convert into
// each other.
type Entry struct {
	Rule    floodgate.Rule
	Key     string
	Expires time.Time
}

// Validate is overrides.Entry.Validate.
func (e Entry) Validate() error {
	var errs []error
	if err := e.Rule.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidEntry, err))
	} else if us := int64(e.Rule.Window / time.Microsecond); e.Rule.Algorithm == floodgate.TokenBucket && e.Rule.Limit > us {
		// The stores refill a bucket one token per emission interval,
		// Window/Limit rounded up to a whole microsecond (internal/algo):
		// a faster rule would be enforced at one token a microsecond
		// while its Decisions report its own limit.
		errs = append(errs, fmt.Errorf("%w: %w: rule %q: %d per %v is more than a token a microsecond, the fastest a token bucket refills; at most %d per %v, or a fixed window",
			ErrInvalidEntry, floodgate.ErrInvalidRule, e.Rule.Name, e.Rule.Limit, e.Rule.Window, us, e.Rule.Window))
	}
	switch {
	case e.Key == "":
		errs = append(errs, fmt.Errorf("%w: key is empty", ErrInvalidEntry))
	case len(e.Key) > bounds.KeyLen:
		errs = append(errs, fmt.Errorf("%w: key is %d bytes, at most %d allowed", ErrInvalidEntry, len(e.Key), bounds.KeyLen))
	}
	if y := e.Expires.UTC().Year(); !e.Expires.IsZero() && (y < 0 || y > 9999) {
		errs = append(errs, fmt.Errorf("%w: expires %v is outside the years 0 to 9999 that its stored form (RFC 3339) holds", ErrInvalidEntry, e.Expires.UTC()))
	}
	return errors.Join(errs...)
}

// ExpiredAt reports whether e is no longer in force at t: its expiry is
// set and not after t.
func (e Entry) ExpiredAt(t time.Time) bool {
	return !e.Expires.IsZero() && !t.Before(e.Expires)
}

// String formats e as `api: 1000/1m0s sliding-window for key
// "customer-42", until 2026-12-01T00:00:00Z` (or ", no expiry"), as the
// command prints it.
func (e Entry) String() string {
	until := "no expiry"
	if !e.Expires.IsZero() {
		until = "until " + e.Expires.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%v for key %q, %s", e.Rule, e.Key, until)
}

// The stored form. The hash field is the rule's name, a colon and the
// key: rule names have no colon (floodgate.Rule.Validate), so the first
// colon splits them, and the key keeps every byte. The value is the
// rule's figures and the expiry, readable in redis-cli:
//
//	api:customer-42 -> limit=1000/1m0s,algorithm=sliding-window
//	api:customer-7  -> limit=50/1s,algorithm=token-bucket,burst=200,expires=2026-12-01T00:00:00Z
const fieldSep = ":"

func (e Entry) field() string { return e.Rule.Name + fieldSep + e.Key }

func (e Entry) value() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limit=%d/%v,algorithm=%v", e.Rule.Limit, e.Rule.Window, e.Rule.Algorithm)
	if e.Rule.Burst > 0 {
		fmt.Fprintf(&b, ",burst=%d", e.Rule.Burst)
	}
	if !e.Expires.IsZero() {
		b.WriteString(",expires=" + e.Expires.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// maxValueLen is the longest stored value parseEntry reads: value()
// writes at most 150 bytes or so. A longer one, written by hand, is
// refused unread, so that parsing and reporting it cost no more than
// its size (a value of a million commas split into a million parts).
const maxValueLen = 1 << 10

// parseEntry reads a stored field and value, and validates the entry.
func parseEntry(field, value string) (Entry, error) {
	name, key, ok := strings.Cut(field, fieldSep)
	if !ok {
		return Entry{}, fmt.Errorf("%w: field %q: want RULE:KEY", ErrInvalidEntry, Truncate(field))
	}
	if len(value) > maxValueLen {
		return Entry{}, fmt.Errorf("%w: field %q: value is %d bytes, at most %d allowed", ErrInvalidEntry, Truncate(field), len(value), maxValueLen)
	}
	fields := map[string]string{}
	for _, part := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || v == "" {
			return Entry{}, fmt.Errorf("%w: field %q: value %q: %q is not NAME=VALUE", ErrInvalidEntry, Truncate(field), Truncate(value), part)
		}
		switch k {
		case "limit", "algorithm", "burst", "expires":
		default:
			return Entry{}, fmt.Errorf("%w: field %q: value %q: unknown %q (want limit, algorithm, burst, expires)", ErrInvalidEntry, Truncate(field), Truncate(value), k)
		}
		if _, dup := fields[k]; dup {
			return Entry{}, fmt.Errorf("%w: field %q: value %q: %s given twice", ErrInvalidEntry, Truncate(field), Truncate(value), k)
		}
		fields[k] = v
	}
	e := Entry{Key: key}
	alg := floodgate.SlidingWindow
	var err error
	if a, ok := fields["algorithm"]; ok {
		if err = alg.UnmarshalText([]byte(a)); err != nil {
			return Entry{}, fmt.Errorf("%w: field %q: %w", ErrInvalidEntry, Truncate(field), err)
		}
	}
	if fields["limit"] == "" {
		return Entry{}, fmt.Errorf("%w: field %q: value %q has no limit", ErrInvalidEntry, Truncate(field), Truncate(value))
	}
	if e.Rule, err = floodgate.ParseLimit(name, fields["limit"], alg); err != nil {
		return Entry{}, fmt.Errorf("%w: field %q: %w", ErrInvalidEntry, Truncate(field), err)
	}
	if b, ok := fields["burst"]; ok {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: field %q: burst %q is not a whole number", ErrInvalidEntry, Truncate(field), b)
		}
		e.Rule.Burst = n
	}
	if x, ok := fields["expires"]; ok {
		if e.Expires, err = time.Parse(time.RFC3339Nano, x); err != nil {
			return Entry{}, fmt.Errorf("%w: field %q: expires %q is not an RFC 3339 time", ErrInvalidEntry, Truncate(field), x)
		}
		if e.Expires.IsZero() {
			// The zero Time is how an Entry says "no expiry"; stored, no
			// expiry is no expires at all. An explicit zero is refused,
			// not read as "never".
			return Entry{}, fmt.Errorf("%w: field %q: expires %q is the zero time, which is not an expiry: leave expires out for an override that lasts until it is removed", ErrInvalidEntry, Truncate(field), x)
		}
	}
	if err := e.Validate(); err != nil {
		return Entry{}, fmt.Errorf("field %q: %w", Truncate(field), err)
	}
	return e, nil
}

// Truncate shortens a field, key or value to 64 bytes for a message.
func Truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// sortEntries sorts es by rule name, then key.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].Rule.Name != es[j].Rule.Name {
			return es[i].Rule.Name < es[j].Rule.Name
		}
		return es[i].Key < es[j].Key
	})
}
