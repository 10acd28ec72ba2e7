package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

const year = 365 * 24 * time.Hour

// maxWindow is bounds.Window as a variable, so that arithmetic on it happens
// at run time: a mutated bounds.Window fails a test instead of the build.
var maxWindow = bounds.Window

// TestRuleBounds: each bound of Rule.Validate, on both sides: the exact
// maximum or minimum is accepted and one step past it is refused.
func TestRuleBounds(t *testing.T) {
	ok := floodgate.Rule{Name: "r", Limit: 1, Window: time.Minute}
	with := func(f func(*floodgate.Rule)) floodgate.Rule { r := ok; f(&r); return r }
	swc := floodgate.SlidingWindowCounter
	tb := floodgate.TokenBucket
	// The sliding-window counter's most per minute: (limit+1) * 6e7 µs
	// within 2^53.
	maxPerMinute := int64(1<<53)/int64(time.Minute/time.Microsecond) - 1
	for _, tc := range []struct {
		name   string
		rule   floodgate.Rule
		wantIn string // "" if valid
	}{
		{"one-byte name", with(func(r *floodgate.Rule) { r.Name = "a" }), ""},
		{"64-byte name", with(func(r *floodgate.Rule) { r.Name = strings.Repeat("n", bounds.NameLen) }), ""},
		{"65-byte name", with(func(r *floodgate.Rule) { r.Name = strings.Repeat("n", bounds.NameLen+1) }), "65 bytes long, at most 64"},
		{"every name byte", with(func(r *floodgate.Rule) {
			r.Name = "azAZ09_.-"
		}), ""},
		{"bad first byte", with(func(r *floodgate.Rule) { r.Name = "!ab" }), `has '!' at byte 0`},
		{"bad last byte", with(func(r *floodgate.Rule) { r.Name = "ab!" }), `has '!' at byte 2`},
		{"space", with(func(r *floodgate.Rule) { r.Name = "a b" }), `has ' ' at byte 1`},
		{"limit 1", ok, ""},
		{"limit 0", with(func(r *floodgate.Rule) { r.Limit = 0 }), "limit is 0, must be at least 1"},
		{"sliding limit at its cap", with(func(r *floodgate.Rule) { r.Limit = bounds.SlidingLimit }), ""},
		{"sliding limit over its cap", with(func(r *floodgate.Rule) { r.Limit = bounds.SlidingLimit + 1 }), "above 1000000"},
		{"token bucket over the sliding cap", with(func(r *floodgate.Rule) { r.Algorithm, r.Limit = tb, bounds.SlidingLimit+1 }), ""},
		{"fixed window over the sliding cap", with(func(r *floodgate.Rule) { r.Algorithm, r.Limit = floodgate.FixedWindow, 1<<40 }), ""},
		{"window 1ms", with(func(r *floodgate.Rule) { r.Window = time.Millisecond }), ""},
		{"window 1ms less 1µs", with(func(r *floodgate.Rule) { r.Window = time.Millisecond - time.Microsecond }), "must be at least 1ms"},
		{"window bounds.Window", with(func(r *floodgate.Rule) { r.Window = bounds.Window }), ""},
		{"window bounds.Window plus 1µs", with(func(r *floodgate.Rule) { r.Window = bounds.Window + time.Microsecond }), "at most 87600h0m0s"},
		{"window of whole µs", with(func(r *floodgate.Rule) { r.Window = time.Millisecond + time.Microsecond }), ""},
		{"window of a fraction of a µs", with(func(r *floodgate.Rule) { r.Window = time.Millisecond + time.Microsecond + 1 }), "not a whole number of microseconds"},
		{"counter at its most per minute", with(func(r *floodgate.Rule) { r.Algorithm, r.Limit = swc, maxPerMinute }), ""},
		{"counter one past its most per minute", with(func(r *floodgate.Rule) { r.Algorithm, r.Limit = swc, maxPerMinute+1 }), "too high for a sliding-window counter"},
		{"counter at its most per ten years", with(func(r *floodgate.Rule) {
			r.Algorithm, r.Window = swc, bounds.Window
			r.Limit = int64(1<<53)/int64(maxWindow/time.Microsecond) - 1
		}), ""},
		{"burst refilled in exactly ten years", with(func(r *floodgate.Rule) { r.Algorithm, r.Window, r.Burst = tb, year, 10 }), ""},
		{"burst refilled in eleven years", with(func(r *floodgate.Rule) { r.Algorithm, r.Window, r.Burst = tb, year, 11 }), "takes longer than 87600h0m0s to refill"},
		{"burst of two limits in five years", with(func(r *floodgate.Rule) { r.Algorithm, r.Window, r.Limit, r.Burst = tb, year, 2, 21 }), ""},
		{"burst of two limits in eleven years", with(func(r *floodgate.Rule) { r.Algorithm, r.Window, r.Limit, r.Burst = tb, year, 2, 22 }), "to refill"},
		{"burst 1", with(func(r *floodgate.Rule) { r.Algorithm, r.Burst = tb, 1 }), ""},
		{"burst -1", with(func(r *floodgate.Rule) { r.Algorithm, r.Burst = tb, -1 }), "burst is -1, must not be negative"},
		{"burst on a fixed window", with(func(r *floodgate.Rule) { r.Algorithm, r.Burst = floodgate.FixedWindow, 1 }), "only meaningful for token-bucket, not fixed-window"},
		{"last algorithm", with(func(r *floodgate.Rule) { r.Algorithm = floodgate.Concurrency }), ""},
		{"one past the last algorithm", with(func(r *floodgate.Rule) { r.Algorithm = floodgate.Concurrency + 1 }), "unknown algorithm Algorithm(5)"},
		{"concurrency limit one past the log's", with(func(r *floodgate.Rule) { r.Algorithm, r.Limit = floodgate.Concurrency, 1_000_001 }), "above 1000000, the most a sliding-window log keeps per key (concurrency)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rule.Validate()
			if tc.wantIn == "" {
				if err != nil {
					t.Fatalf("Validate(%v) = %v; want valid", tc.rule, err)
				}
				return
			}
			if !errors.Is(err, floodgate.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("Validate(%v) = %v; want ErrInvalidRule mentioning %q", tc.rule, err, tc.wantIn)
			}
		})
	}
}

// TestRuleNameBytes: a name accepts exactly A-Z a-z 0-9 _ . - ; the bytes
// next to each range are refused.
func TestRuleNameBytes(t *testing.T) {
	for c := range 256 {
		want := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		for _, name := range []string{string(rune(c)), "x" + string([]byte{byte(c)})} {
			_, err := floodgate.NewRule(name, 1, time.Second, floodgate.SlidingWindow)
			if (err == nil) != want {
				t.Errorf("NewRule(%q) = %v; want valid %v", name, err, want)
			}
		}
	}
}

// TestInvalidRulesNeverDivideByZero: the checks that divide (the counter's
// product, the bucket's refill time) must not run on a zero or negative
// limit or window, whatever else is wrong.
func TestInvalidRulesNeverDivideByZero(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		for _, limit := range []int64{-1, 0, 1, 1 << 62} {
			for _, window := range []time.Duration{-time.Second, 0, 1, time.Microsecond - 1, time.Microsecond, time.Second} {
				for _, burst := range []int64{-1, 0, 1, 1 << 62} {
					r := floodgate.Rule{Name: "r", Limit: limit, Window: window, Algorithm: alg, Burst: burst}
					valid := limit > 0 && window >= time.Millisecond
					if err := r.Validate(); err == nil && !valid {
						t.Errorf("Validate(%v) accepted it", r)
					}
				}
			}
		}
	}
}

// TestHitBounds: a hit's cost may reach its rule's capacity (Burst for a
// token bucket that sets it, Limit otherwise) and a sliding log's cost cap,
// and its key 1 MiB, but no more.
func TestHitBounds(t *testing.T) {
	ctx := context.Background()
	tb, err := floodgate.NewRule("tb", 5, time.Minute, floodgate.TokenBucket)
	if err != nil {
		t.Fatal(err)
	}
	burst := tb
	burst.Burst = 8
	if err := burst.Validate(); err != nil {
		t.Fatal(err)
	}
	sliding := mustRule(t, "sw", 5000, time.Minute)
	for _, tc := range []struct {
		name  string
		hit   floodgate.Hit
		valid bool
	}{
		{"cost = limit", floodgate.Hit{Rule: tb, Key: "a", Cost: 5}, true},
		{"cost > limit", floodgate.Hit{Rule: tb, Key: "a", Cost: 6}, false},
		{"cost = burst", floodgate.Hit{Rule: burst, Key: "b", Cost: 8}, true},
		{"cost > burst", floodgate.Hit{Rule: burst, Key: "b", Cost: 9}, false},
		{"cost 0 means 1", floodgate.Hit{Rule: sliding, Key: "c"}, true},
		{"cost -1", floodgate.Hit{Rule: sliding, Key: "c", Cost: -1}, false},
		{"sliding cost at its cap", floodgate.Hit{Rule: sliding, Key: "d", Cost: bounds.SlidingCost}, true},
		{"sliding cost over its cap", floodgate.Hit{Rule: sliding, Key: "d", Cost: bounds.SlidingCost + 1}, false},
		{"key of 1 MiB", floodgate.Hit{Rule: sliding, Key: strings.Repeat("k", bounds.KeyLen)}, true},
		{"key of 1 MiB and a byte", floodgate.Hit{Rule: sliding, Key: strings.Repeat("k", bounds.KeyLen+1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, check := range []func(*floodgate.Limiter) (floodgate.Decision, error){
				func(l *floodgate.Limiter) (floodgate.Decision, error) {
					return l.Check(ctx, floodgate.Hit{Rule: tc.hit.Rule, Key: tc.hit.Key, Cost: tc.hit.Cost})
				},
				func(l *floodgate.Limiter) (floodgate.Decision, error) {
					return l.Check(ctx, tc.hit, floodgate.Hit{Rule: tc.hit.Rule, Key: "other"})
				},
				func(l *floodgate.Limiter) (floodgate.Decision, error) { return l.Peek(ctx, tc.hit) },
			} {
				d, err := check(newLimiter(t))
				if tc.valid && (err != nil || !d.Allowed) {
					t.Fatalf("got %+v, %v; want allowed", d, err)
				}
				if !tc.valid && !errors.Is(err, floodgate.ErrInvalidHit) {
					t.Fatalf("got %+v, %v; want ErrInvalidHit", d, err)
				}
			}
		})
	}
}

// TestRuleString covers the forms of Rule.String.
func TestRuleString(t *testing.T) {
	r, _ := floodgate.NewRule("api", 10, time.Minute, floodgate.TokenBucket)
	if s := r.String(); s != "api: 10/1m0s token-bucket" {
		t.Errorf("String() = %q", s)
	}
	r.Burst = 20
	if s := r.String(); s != "api: 10/1m0s token-bucket, burst 20" {
		t.Errorf("String() = %q", s)
	}
}

// FuzzNewRule: NewRule and Validate never panic; they accept a rule only
// within every documented bound, and every error wraps ErrInvalidRule.
func FuzzNewRule(f *testing.F) {
	f.Add("r", int64(1), int64(time.Second), uint8(0), int64(0))
	f.Add("r", int64(0), int64(0), uint8(1), int64(1))
	f.Add("r", int64(5), int64(0), uint8(1), int64(10))
	f.Add("r", int64(0), int64(time.Second), uint8(1), int64(10))
	f.Add("r", int64(1), int64(500), uint8(3), int64(0))
	f.Add("r", int64(-1), int64(-1), uint8(3), int64(-1))
	f.Add("r", int64(1<<62), int64(bounds.Window), uint8(3), int64(0))
	f.Add("r", int64(1), int64(time.Millisecond), uint8(1), int64(1<<62))
	f.Add("", int64(1), int64(time.Second), uint8(9), int64(0))
	f.Fuzz(func(t *testing.T, name string, limit, window int64, alg uint8, burst int64) {
		r := floodgate.Rule{Name: name, Limit: limit, Window: time.Duration(window), Algorithm: floodgate.Algorithm(alg), Burst: burst}
		_, err := floodgate.NewRule(name, limit, time.Duration(window), floodgate.Algorithm(alg))
		verr := r.Validate()
		for _, e := range []error{err, verr} {
			if e != nil && !errors.Is(e, floodgate.ErrInvalidRule) {
				t.Fatalf("%v: error %v does not wrap ErrInvalidRule", r, e)
			}
		}
		if verr != nil {
			return
		}
		w := r.Window
		if name == "" || len(name) > bounds.NameLen || limit < 1 || w < time.Millisecond || w > bounds.Window ||
			w%time.Microsecond != 0 || alg > uint8(floodgate.Concurrency) || burst < 0 ||
			burst > 0 && r.Algorithm != floodgate.TokenBucket ||
			(r.Algorithm == floodgate.SlidingWindow || r.Algorithm == floodgate.Concurrency) && limit > bounds.SlidingLimit {
			t.Fatalf("Validate accepted %v", r)
		}
		if r.Algorithm == floodgate.SlidingWindowCounter && float64(limit+1)*float64(w/time.Microsecond) > 1<<53 {
			t.Fatalf("Validate accepted %v, whose (limit+1) x window exceeds 2^53 µs", r)
		}
		if r.Capacity() < 1 {
			t.Fatalf("valid rule %v has capacity %d", r, r.Capacity())
		}
	})
}

// TestHitErrorsNameEachProblemOnly: an invalid hit's error lists each of
// its problems and nothing else, so a value at its bound is never blamed.
func TestHitErrorsNameEachProblemOnly(t *testing.T) {
	l := newLimiter(t)
	tb, err := floodgate.NewRule("tb", 5, time.Minute, floodgate.TokenBucket)
	if err != nil {
		t.Fatal(err)
	}
	sliding := mustRule(t, "sw", 5000, time.Minute)
	maxKey := strings.Repeat("k", bounds.KeyLen)
	for _, tc := range []struct {
		name string
		hit  floodgate.Hit
		want []string
	}{
		{"empty key, cost 1", floodgate.Hit{Rule: tb, Cost: 1}, []string{"key is empty"}},
		{"empty key, cost at capacity", floodgate.Hit{Rule: tb, Cost: 5}, []string{"key is empty"}},
		{"empty key, sliding cost at its cap", floodgate.Hit{Rule: sliding, Cost: bounds.SlidingCost}, []string{"key is empty"}},
		{"key at its bound, cost -1", floodgate.Hit{Rule: tb, Key: maxKey, Cost: -1}, []string{"cost -1 is below 1"}},
		{"key over its bound, cost over capacity", floodgate.Hit{Rule: tb, Key: maxKey + "k", Cost: 6},
			[]string{"key is 1048577 bytes", "cost 6 exceeds the rule's capacity 5"}},
		{"empty key, sliding cost over its cap", floodgate.Hit{Rule: sliding, Cost: bounds.SlidingCost + 1},
			[]string{"key is empty", "cost 101 is above 100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Check(context.Background(), tc.hit)
			if !errors.Is(err, floodgate.ErrInvalidHit) {
				t.Fatalf("Check = %v; want ErrInvalidHit", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if n := strings.Count(msg, "floodgate: invalid hit"); n != len(tc.want) {
				t.Errorf("error %q lists %d problems; want %d", msg, n, len(tc.want))
			}
		})
	}
}

// TestDuplicateHitErrorShortensKeys: the error about a key given twice
// quotes a key of up to 32 bytes whole and a longer one cut to 32 bytes.
func TestDuplicateHitErrorShortensKeys(t *testing.T) {
	l := newLimiter(t)
	r := mustRule(t, "r", 5, time.Minute)
	for _, tc := range []struct{ key, quoted string }{
		{strings.Repeat("a", 32), `"` + strings.Repeat("a", 32) + `"`},
		{strings.Repeat("b", 33), `"` + strings.Repeat("b", 32) + `..."`},
	} {
		_, err := l.Check(context.Background(), floodgate.Hit{Rule: r, Key: tc.key}, floodgate.Hit{Rule: r, Key: tc.key})
		if !errors.Is(err, floodgate.ErrInvalidHit) || !strings.Contains(err.Error(), "key "+tc.quoted+" under rule r") {
			t.Errorf("Check of key %d bytes twice = %v; want it to quote the key as %s", len(tc.key), err, tc.quoted)
		}
	}
}

// TestParseLimitBareUnit: a window that starts with a letter is a bare
// unit, one of it ("10/m" is 10 per minute); anything else is parsed as it
// is. Errors quote the window as the user wrote it, never with the "1" a
// bare unit is read with (so the letter edges are no longer visible in
// them: docs/TESTING.md lists that mutant as equivalent).
func TestParseLimitBareUnit(t *testing.T) {
	for _, c := range "aAzZ@[`{/:" {
		_, err := floodgate.ParseLimit("r", "10/"+string(c), floodgate.SlidingWindow)
		if want := `window "` + string(c) + `"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(10/%c) = %v; want it read as is, %s", c, err, want)
		}
	}
	for spec, want := range map[string]time.Duration{"10/h": time.Hour, "10/s": time.Second, "10/ms": time.Millisecond, "10/5m": 5 * time.Minute} {
		if r, err := floodgate.ParseLimit("r", spec, floodgate.SlidingWindow); err != nil || r.Window != want || r.Limit != 10 {
			t.Errorf("ParseLimit(%s) = %v, %v; want 10 per %v", spec, r, err, want)
		}
	}
}
