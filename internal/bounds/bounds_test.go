package bounds_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// TestNameBytesEveryByte checks the charsets of rule and gate names on
// every byte value, at every position of a short name: a bit off by one
// in NameByte's bitmaps would let a brace (a Redis Cluster hash tag) or a
// separator into a store key, or refuse a letter.
func TestNameBytesEveryByte(t *testing.T) {
	rule := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	var rules, gates int
	for c := range 256 {
		b := byte(c)
		if got, want := bounds.NameByte(b), rule(b); got != want {
			t.Errorf("NameByte(%q) = %v, want %v", b, got, want)
		}
		if got, want := bounds.GateNameByte(b), rule(b) || b == '+' || b == '/'; got != want {
			t.Errorf("GateNameByte(%q) = %v, want %v", b, got, want)
		}
		for at := range 3 {
			name := []byte("abc")
			name[at] = b
			want := -1
			if !rule(b) {
				want = at
			}
			if got := bounds.BadNameByte(string(name)); got != want {
				t.Errorf("BadNameByte(%q) = %d, want %d", name, got, want)
			}
		}
		if bounds.NameByte(b) {
			rules++
		}
		if bounds.GateNameByte(b) {
			gates++
		}
	}
	if rules != 26+26+10+3 || gates != rules+2 {
		t.Fatalf("%d bytes allowed in rule names and %d in gate names, want 65 and 67", rules, gates)
	}
	if got := bounds.BadNameByte(""); got != -1 {
		t.Errorf(`BadNameByte("") = %d, want -1`, got)
	}
}

func TestGateName(t *testing.T) {
	long := string(make([]byte, bounds.GateNameLen))
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"", false},
		{"a", true},
		{"api/v1+beta_2.x-y", true},
		{strings.Repeat("a", bounds.GateNameLen), true},
		{strings.Repeat("a", bounds.GateNameLen+1), false},
		{long, false}, // NUL bytes
		{"a b", false},
		{"a{b}", false},
		{"ré", false},
	} {
		if got := bounds.GateName(tc.name); got != tc.want {
			t.Errorf("GateName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
