package oracle

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLogRoundTrip writes a log as a replica does and reads it back: the
// rules, every admission's span and the tally; a torn last line is
// dropped, and logs that disagree on a rule are refused.
func TestLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rules := Rules(50, 500*time.Millisecond)
	path := filepath.Join(dir, "replica-0.log")
	w, err := Create(path, 0, Direct, rules)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Unix(1_796_000_000, 123_456_789)
	w.Admit(rules[0].Algorithm, sent, sent.Add(84*time.Microsecond))
	w.Admit(rules[3].Algorithm, sent.Add(time.Second), sent.Add(time.Second))
	w.Tally(Tally{Allowed: 2, Denied: 5, Errors: 1, Takes: 8, Leases: 0})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A killed replica's log: its last line cut short.
	torn := filepath.Join(dir, "replica-1.log")
	data, _ := os.ReadFile(path)
	head := string(data[:strings.Index(string(data), "\ns ")+1])
	if err := os.WriteFile(torn, []byte(head+"f 1796000000500000000 12\ns 17960000"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := ReadFiles(path, torn)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Rules, rules) {
		t.Errorf("rules %v, want %v", l.Rules, rules)
	}
	lo := sent.UnixNano()
	want := map[string][]Span{
		"oracle-s": {{Lo: lo, Hi: lo + 84_000}},
		"oracle-t": {{Lo: lo + 1e9, Hi: lo + 1e9}},
		"oracle-f": {{Lo: 1_796_000_000_500_000_000, Hi: 1_796_000_000_500_000_012}},
	}
	if !reflect.DeepEqual(l.Spans, want) {
		t.Errorf("spans %v, want %v", l.Spans, want)
	}
	if want := []Tally{{Allowed: 2, Denied: 5, Errors: 1, Takes: 8}}; !reflect.DeepEqual(l.Tallies, want) {
		t.Errorf("tallies %+v, want %+v", l.Tallies, want)
	}

	other := filepath.Join(dir, "other.log")
	if w, err := Create(other, 2, Direct, Rules(60, 500*time.Millisecond)); err != nil {
		t.Fatal(err)
	} else if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFiles(path, other); err == nil || !strings.Contains(err.Error(), "differs from another log's") {
		t.Errorf("logs of different limits: error %v, want a rule that differs", err)
	}
}
