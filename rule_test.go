package floodgate_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
)

func TestNewRuleRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rule   floodgate.Rule
		wantIn string // part of the error message
	}{
		{"empty name", floodgate.Rule{Limit: 1, Window: time.Second}, "name is empty"},
		{"long name", floodgate.Rule{Name: strings.Repeat("n", 65), Limit: 1, Window: time.Second}, "65 bytes"},
		{"brace in name", floodgate.Rule{Name: "a{b}", Limit: 1, Window: time.Second}, `has '{'`},
		{"zero limit", floodgate.Rule{Name: "r", Window: time.Second}, "limit is 0"},
		{"negative limit", floodgate.Rule{Name: "r", Limit: -3, Window: time.Second}, "limit is -3"},
		{"zero window", floodgate.Rule{Name: "r", Limit: 1}, "window is 0s"},
		{"negative window", floodgate.Rule{Name: "r", Limit: 1, Window: -time.Second}, "window is -1s"},
		{"sub-millisecond window", floodgate.Rule{Name: "r", Limit: 1, Window: time.Microsecond}, "at least 1ms"},
		{"fractional microseconds", floodgate.Rule{Name: "r", Limit: 1, Window: time.Millisecond + 1}, "whole number of microseconds"},
		{"sliding log over its limit cap", floodgate.Rule{Name: "r", Limit: bounds.SlidingLimit + 1, Window: time.Minute}, "use token-bucket"},
		{"window over ten years", floodgate.Rule{Name: "r", Limit: 1, Window: bounds.Window + time.Hour}, "at most"},
		{"burst refilling for over ten years", floodgate.Rule{Name: "r", Limit: 1, Window: 24 * time.Hour, Algorithm: floodgate.TokenBucket, Burst: 10 * 366}, "to refill"},
		{"unknown algorithm", floodgate.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: 9}, "unknown algorithm"},
		{"counter limit too high", floodgate.Rule{Name: "r", Limit: 3_000_000, Window: time.Hour, Algorithm: floodgate.SlidingWindowCounter}, "too high for a sliding-window counter"},
		{"negative burst", floodgate.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: floodgate.TokenBucket, Burst: -1}, "burst is -1"},
		{"burst on sliding window", floodgate.Rule{Name: "r", Limit: 1, Window: time.Second, Burst: 2}, "only meaningful for token-bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			_, err := floodgate.NewRule(r.Name, r.Limit, r.Window, r.Algorithm)
			if r.Burst != 0 {
				err = r.Validate()
			}
			if !errors.Is(err, floodgate.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("got %v; want ErrInvalidRule mentioning %q", err, tc.wantIn)
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	err := floodgate.Rule{Limit: -1, Window: -1, Algorithm: 7}.Validate()
	for _, want := range []string{"name is empty", "limit is -1", "window is -1ns", "unknown algorithm"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		limit   int64
		window  time.Duration
		wantErr string
	}{
		{"10/1m", 10, time.Minute, ""},
		{"30/60s", 30, time.Minute, ""},
		{" 5/10m ", 5, 10 * time.Minute, ""},
		{"100/h", 100, time.Hour, ""},
		{"1/1ms", 1, time.Millisecond, ""},
		{"10", 0, 0, "want COUNT/WINDOW"},
		{"ten/1m", 0, 0, `count "ten"`},
		{"10/forever", 0, 0, `window "forever"`},
		{"10/min", 0, 0, `limit "10/min": window "min" is not`},
		{"10/1x", 0, 0, `window "1x"`},
		{"10/", 0, 0, "window"},
		{"0/1m", 0, 0, "limit is 0"},
		{"-1/1m", 0, 0, "limit is -1"},
		{"10/-1m", 0, 0, "window is -1m0s"},
		{"99999999999999999999/1m", 0, 0, "not a whole number"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			r, err := floodgate.ParseLimit("p", tc.spec, floodgate.SlidingWindow)
			if tc.wantErr != "" {
				if !errors.Is(err, floodgate.ErrInvalidRule) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLimit(%q) = %v, %v; want ErrInvalidRule mentioning %q", tc.spec, r, err, tc.wantErr)
				}
				return
			}
			if err != nil || r.Limit != tc.limit || r.Window != tc.window {
				t.Fatalf("ParseLimit(%q) = %v, %v; want %d per %v", tc.spec, r, err, tc.limit, tc.window)
			}
		})
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.Concurrency} {
		got := floodgate.Algorithm(7)
		if err := got.UnmarshalText([]byte(a.String())); err != nil || got != a {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	got := floodgate.TokenBucket
	if err := got.UnmarshalText([]byte("leaky")); !errors.Is(err, floodgate.ErrInvalidRule) || got != floodgate.TokenBucket {
		t.Errorf("UnmarshalText(leaky) = %v, left %v; want ErrInvalidRule and the algorithm unchanged", err, got)
	}
	if s := floodgate.Algorithm(9).String(); s != "Algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", s)
	}
	if b, err := floodgate.Algorithm(9).MarshalText(); !errors.Is(err, floodgate.ErrInvalidRule) || b != nil {
		t.Errorf("Algorithm(9).MarshalText() = %q, %v; want ErrInvalidRule", b, err)
	}
}

// An Algorithm is a flag and a JSON field, by its name, both ways.
func TestAlgorithmAsFlagAndJSON(t *testing.T) {
	names := map[floodgate.Algorithm]string{
		floodgate.SlidingWindow: "sliding-window", floodgate.TokenBucket: "token-bucket",
		floodgate.FixedWindow: "fixed-window", floodgate.SlidingWindowCounter: "sliding-window-counter",
		floodgate.Concurrency: "concurrency",
	}
	for a, name := range names {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var got floodgate.Algorithm
		fs.TextVar(&got, "alg", floodgate.FixedWindow, "the algorithm")
		if def := fs.Lookup("alg").DefValue; def != "fixed-window" {
			t.Errorf("flag default shown as %q; want fixed-window", def)
		}
		if err := fs.Parse([]string{"-alg", name}); err != nil || got != a {
			t.Errorf("-alg %s: %v, %v; want %v", name, got, err, a)
		}
		b, err := json.Marshal(struct{ Algorithm floodgate.Algorithm }{a})
		if want := `{"Algorithm":"` + name + `"}`; err != nil || string(b) != want {
			t.Errorf("json.Marshal(%v) = %s, %v; want %s", a, b, err, want)
		}
		var back struct{ Algorithm floodgate.Algorithm }
		if err := json.Unmarshal(b, &back); err != nil || back.Algorithm != a {
			t.Errorf("json.Unmarshal(%s) = %v, %v; want %v", b, back.Algorithm, err, a)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var got floodgate.Algorithm
	fs.TextVar(&got, "alg", floodgate.TokenBucket, "the algorithm")
	if err := fs.Parse([]string{"-alg", "leaky"}); err == nil || got != floodgate.TokenBucket {
		t.Errorf("-alg leaky: %v, left %v; want an error and the default kept", err, got)
	}
	if _, err := json.Marshal(struct{ A floodgate.Algorithm }{9}); !errors.Is(err, floodgate.ErrInvalidRule) {
		t.Errorf("json.Marshal of Algorithm(9): %v; want an error wrapping ErrInvalidRule", err)
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10/1m", "5/10m", "1/h", "0/0", "/", "9223372036854775807/1ns", "1/2562047h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := floodgate.ParseLimit("fuzz", spec, floodgate.SlidingWindow)
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidRule) {
				t.Fatalf("ParseLimit(%q): error %v does not wrap ErrInvalidRule", spec, err)
			}
			return
		}
		if r.Validate() != nil || r.Limit < 1 || r.Window < time.Millisecond {
			t.Fatalf("ParseLimit(%q) = %v accepted an invalid rule", spec, r)
		}
	})
}
