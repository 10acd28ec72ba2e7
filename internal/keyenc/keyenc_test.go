package keyenc

import (
	"strings"
	"testing"
)

func TestEncode(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.9", "203.0.113.9"},
		{"2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"account:3f2a", "account:3f2a"},
		{"{tag}", "~"},
		{"a b", "~"},
		{"line\nbreak", "~"},
		{"\xff", "~"},
		{"~abc", "~"},
		{strings.Repeat("a", MaxPlain), strings.Repeat("a", MaxPlain)},
		{strings.Repeat("a", MaxPlain+1), "~"},
	} {
		got := Encode(tc.in)
		if tc.want == "~" {
			if !strings.HasPrefix(got, "~") || len(got) != 25 {
				t.Errorf("Encode(%q) = %q; want a 25-byte digest starting with ~", tc.in, got)
			}
		} else if got != tc.want {
			t.Errorf("Encode(%q) = %q; want it unchanged", tc.in, got)
		}
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "a", "{a}", "~x", "203.0.113.9", strings.Repeat("z", 49), "\x00\xff"} {
		f.Add(s, "b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := Encode(a), Encode(b)
		if len(ea) > MaxPlain || strings.ContainsAny(ea, "{}\r\n \x00") {
			t.Fatalf("Encode(%q) = %q: too long or unsafe", a, ea)
		}
		if a != b && ea == eb {
			t.Fatalf("Encode(%q) == Encode(%q) == %q: the encoding must be injective", a, b, ea)
		}
		if Encode(a) != ea {
			t.Fatal("Encode is not deterministic")
		}
	})
}
