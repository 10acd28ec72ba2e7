package overridetable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

func rule(t *testing.T, name string, limit int64, window time.Duration, alg floodgate.Algorithm) floodgate.Rule {
	t.Helper()
	r, err := floodgate.NewRule(name, limit, window, alg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every valid entry reads back as it was stored.
func TestEntryRoundTrip(t *testing.T) {
	tb := rule(t, "api", 50, time.Second, floodgate.TokenBucket)
	tb.Burst = 200
	until := time.Date(2026, 12, 1, 0, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name  string
		e     Entry
		field string
		value string
	}{
		{"plain", Entry{Rule: rule(t, "api", 1000, time.Minute, floodgate.SlidingWindow), Key: "customer-42"},
			"api:customer-42", "limit=1000/1m0s,algorithm=sliding-window"},
		{"burst and expiry", Entry{Rule: tb, Key: "customer-7", Expires: until},
			"api:customer-7", "limit=50/1s,algorithm=token-bucket,burst=200,expires=2026-12-01T00:00:00.123456789Z"},
		{"key with colons, braces and a newline", Entry{Rule: rule(t, "login", 5, 10*time.Minute, floodgate.FixedWindow), Key: "a:b{c}\nd"},
			"login:a:b{c}\nd", "limit=5/10m0s,algorithm=fixed-window"},
		{"counter", Entry{Rule: rule(t, "x.y-z_1", 1, time.Millisecond, floodgate.SlidingWindowCounter), Key: "k"},
			"x.y-z_1:k", "limit=1/1ms,algorithm=sliding-window-counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, v := tc.e.field(), tc.e.value(); f != tc.field || v != tc.value {
				t.Fatalf("stored as %q = %q; want %q = %q", f, v, tc.field, tc.value)
			}
			got, err := parseEntry(tc.field, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if got.Rule != tc.e.Rule || got.Key != tc.e.Key || !got.Expires.Equal(tc.e.Expires) {
				t.Fatalf("read back %+v; want %+v", got, tc.e)
			}
		})
	}
}

// A value written by hand in a shorter form reads as the CLI's.
func TestParseEntryShortForms(t *testing.T) {
	e, err := parseEntry("api:k", "limit=10/m")
	if err != nil || e.Rule != rule(t, "api", 10, time.Minute, floodgate.SlidingWindow) || e.Key != "k" || !e.Expires.IsZero() {
		t.Fatalf("limit=10/m = %+v, %v; want api 10/1m sliding-window, no expiry", e, err)
	}
	e, err = parseEntry("api:k", "expires=2026-12-01T01:00:00+01:00,algorithm=token-bucket,limit=3/1s")
	if err != nil || e.Rule.Algorithm != floodgate.TokenBucket || !e.Expires.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("fields in another order = %+v, %v", e, err)
	}
	// The longest value read: 1 KiB (one byte more is refused, below).
	long := "limit=" + strings.Repeat("0", 1<<10-10) + "5/1m"
	if e, err = parseEntry("api:k", long); err != nil || len(long) != 1<<10 || e.Rule != rule(t, "api", 5, time.Minute, floodgate.SlidingWindow) {
		t.Fatalf("a value of %d bytes = %+v, %v; want api 5/1m", len(long), e, err)
	}
}

// Every malformed entry is refused with a reason, wrapping
// ErrInvalidEntry (and ErrInvalidRule for a bad rule).
func TestParseEntryRejects(t *testing.T) {
	for _, tc := range []struct {
		name, field, value, want string
		rule                     bool
	}{
		{"no separator", "api", "limit=1/1m", "want RULE:KEY", false},
		{"empty key", "api:", "limit=1/1m", "key is empty", false},
		{"bad rule name", "a b:k", "limit=1/1m", "name has", true},
		{"empty rule name", ":k", "limit=1/1m", "name is empty", true},
		{"no limit", "api:k", "algorithm=token-bucket", "no limit", false},
		{"zero limit", "api:k", "limit=0/1m", "limit is 0", true},
		{"bad window", "api:k", "limit=1/fortnight", "not a duration", true},
		{"unknown algorithm", "api:k", "limit=1/1m,algorithm=leaky", "algorithm", true},
		{"burst on a window", "api:k", "limit=1/1m,burst=5", "burst is only meaningful", true},
		{"bad burst", "api:k", "limit=1/1m,algorithm=token-bucket,burst=x", "burst \"x\" is not a whole number", false},
		{"bad expiry", "api:k", "limit=1/1m,expires=tomorrow", "not an RFC 3339 time", false},
		{"unknown field", "api:k", "limit=1/1m,owner=bob", "unknown \"owner\"", false},
		{"duplicate field", "api:k", "limit=1/1m,limit=2/1m", "limit given twice", false},
		{"not NAME=VALUE", "api:k", "1000/1m", "is not NAME=VALUE", false},
		{"empty value", "api:k", "", "is not NAME=VALUE", false},
		{"sliding limit too high", "api:k", "limit=2000000/1m", "sliding-window log", true},
		{"zero expiry", "api:k", "limit=1/1m,expires=0001-01-01T00:00:00Z", "zero time", false},
		{"zero expiry in another zone", "api:k", "limit=1/1m,expires=0001-01-01T01:00:00+01:00", "zero time", false},
		{"token bucket past a token a microsecond", "api:k", "limit=2251799813685248/87600h,algorithm=token-bucket", "a token a microsecond", true},
		{"value past 1 KiB", "api:k", "limit=" + strings.Repeat("0", 1<<10-9) + "5/1m", "value is 1025 bytes, at most 1024 allowed", false},
		{"value of a million commas", "api:k", strings.Repeat(",", 1<<20), "value is 1048576 bytes, at most 1024 allowed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseEntry(tc.field, tc.value)
			if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%q = %.60q: %v; want ErrInvalidEntry saying %q", tc.field, tc.value, err, tc.want)
			}
			if got := errors.Is(err, floodgate.ErrInvalidRule); got != tc.rule {
				t.Errorf("errors.Is(err, ErrInvalidRule) = %v; want %v", got, tc.rule)
			}
		})
	}
}

// An entry's rule must be one the stores hold as it is stated: the core's
// bounds (floodgate.Rule.Validate) and, for a token bucket, at most one
// token a microsecond, the stores' resolution (a faster one is enforced
// at one a microsecond while its Decisions report the rule's limit).
// Each bound is checked on both sides.
func TestEntryRuleBounds(t *testing.T) {
	tenYears := bounds.Window
	for _, tc := range []struct {
		name string
		rule floodgate.Rule
		want string // "" if valid
	}{
		{"token bucket of 2^51 per ten years", floodgate.Rule{Name: "api", Limit: bounds.Limit, Window: tenYears, Algorithm: floodgate.TokenBucket}, "a token a microsecond"},
		{"token bucket of one a microsecond", floodgate.Rule{Name: "api", Limit: 1000, Window: time.Millisecond, Algorithm: floodgate.TokenBucket}, ""},
		{"token bucket of one more", floodgate.Rule{Name: "api", Limit: 1001, Window: time.Millisecond, Algorithm: floodgate.TokenBucket}, "a token a microsecond"},
		{"token bucket of one a microsecond for ten years", floodgate.Rule{Name: "api", Limit: int64(tenYears / time.Microsecond), Window: tenYears, Algorithm: floodgate.TokenBucket}, ""},
		{"token bucket of one a microsecond, bursting to ten years of it", floodgate.Rule{Name: "api", Limit: 1000, Window: time.Millisecond, Algorithm: floodgate.TokenBucket, Burst: int64(tenYears / time.Microsecond)}, ""},
		{"fixed window of 2^51 per ten years", floodgate.Rule{Name: "api", Limit: bounds.Limit, Window: tenYears, Algorithm: floodgate.FixedWindow}, ""},
		{"fixed window past 2^51", floodgate.Rule{Name: "api", Limit: bounds.Limit + 1, Window: tenYears, Algorithm: floodgate.FixedWindow}, "above"},
		{"sliding window at its cap", floodgate.Rule{Name: "api", Limit: bounds.SlidingLimit, Window: time.Minute}, ""},
		{"sliding window past its cap", floodgate.Rule{Name: "api", Limit: bounds.SlidingLimit + 1, Window: time.Minute}, "sliding-window log"},
		{"counter of 2^51 per ten years", floodgate.Rule{Name: "api", Limit: bounds.Limit, Window: tenYears, Algorithm: floodgate.SlidingWindowCounter}, "too high for a sliding-window counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Entry{Rule: tc.rule, Key: "k"}
			for how, err := range map[string]error{"Validate": e.Validate()} {
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s(%v) = %v; want valid", how, tc.rule, err)
					}
					continue
				}
				if !errors.Is(err, ErrInvalidEntry) || !errors.Is(err, floodgate.ErrInvalidRule) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s(%v) = %v; want ErrInvalidEntry and ErrInvalidRule saying %q", how, tc.rule, err, tc.want)
				}
			}
			// The stored form is held to the same bounds when it is read.
			if _, err := parseEntry(e.field(), e.value()); (err == nil) != (tc.want == "") {
				t.Errorf("parseEntry(%q) = %v; want valid %v", e.value(), err, tc.want == "")
			}
		})
	}
}

// An expiry is stored as RFC 3339, which holds the years 0000 to 9999: an
// entry whose expiry it cannot hold is refused when set, not written in a
// form that every service would then skip. The zero Time is no expiry.
func TestEntryExpiryBounds(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	for _, tc := range []struct {
		expires time.Time
		valid   bool
	}{
		{time.Time{}, true},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), true},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), true}, // expired long ago, but not the zero Time
		{time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC), true},
		{time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC), false},
	} {
		e := Entry{Rule: api, Key: "k", Expires: tc.expires}
		err := e.Validate()
		if (err == nil) != tc.valid || err != nil && !errors.Is(err, ErrInvalidEntry) {
			t.Errorf("Validate with expiry %v = %v; want valid %v", tc.expires, err, tc.valid)
		}
		if err != nil {
			continue
		}
		back, err := parseEntry(e.field(), e.value())
		if err != nil || !back.Expires.Equal(e.Expires) {
			t.Errorf("expiry %v stored as %q reads back as %v, %v", tc.expires, e.value(), back.Expires, err)
		}
	}
}

// The edges of an entry and of its messages: a key of MaxKeyLen bytes is
// valid, one more is not; a text of 64 bytes is quoted whole, a longer
// one cut there.
func TestEdges(t *testing.T) {
	api := rule(t, "api", 10, time.Minute, floodgate.SlidingWindow)
	if err := (Entry{Rule: api, Key: strings.Repeat("k", bounds.KeyLen)}).Validate(); err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v; want valid", err)
	}
	s64 := strings.Repeat("x", 64)
	if got := Truncate(s64); got != s64 {
		t.Errorf("Truncate of 64 bytes = %q; want it whole", got)
	}
	if got := Truncate(s64 + "y"); got != s64+"..." {
		t.Errorf("Truncate of 65 bytes = %q; want 64 and ...", got)
	}
	e := Entry{Rule: api, Key: "k", Expires: time.Date(2026, 12, 1, 1, 0, 0, 0, time.FixedZone("x", 3600))}
	if got, want := e.String(), `api: 10/1m0s sliding-window for key "k", until 2026-12-01T00:00:00Z`; got != want {
		t.Errorf("String = %q; want %q", got, want)
	}
	if got, want := (Entry{Rule: api, Key: "k"}).String(), `api: 10/1m0s sliding-window for key "k", no expiry`; got != want {
		t.Errorf("String = %q; want %q", got, want)
	}
}
