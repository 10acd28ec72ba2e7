package keyenc

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"
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

// TestNameHashTellsNamesApart: rule names that differ in a single byte,
// anywhere, or only in length, mix to different values, over sets of
// names as configurations write them: numbered routes, prefixes and
// suffixes of one another, every length up to 64 bytes.
func TestNameHashTellsNamesApart(t *testing.T) {
	var names []string
	for i := range 20_000 {
		names = append(names, fmt.Sprintf("route-%05d-limit-per-minute", i), fmt.Sprintf("r%d", i), fmt.Sprintf("tenant.%d.login", i))
	}
	for n := 1; n <= 64; n++ {
		names = append(names, strings.Repeat("a", n), strings.Repeat("a", n-1)+"b", "b"+strings.Repeat("a", n-1))
	}
	seen := make(map[uint64]string, len(names))
	distinct := map[string]bool{}
	for _, name := range names {
		h := nameHash(name)
		if other, ok := seen[h]; ok && other != name {
			t.Fatalf("nameHash(%q) == nameHash(%q)", name, other)
		}
		seen[h] = name
		distinct[name] = true
	}
	if len(seen) != len(distinct) {
		t.Fatalf("%d distinct hashes of %d distinct names", len(seen), len(distinct))
	}
}

// TestIdentityTellsRulesApart: one key under rules that differ only in
// name, algorithm or window has a different identity for each.
func TestIdentityTellsRulesApart(t *testing.T) {
	seed := maphash.MakeSeed()
	seen := map[uint64]string{}
	for _, name := range []string{"login", "logim", "login2", "pix"} {
		for alg := range uint8(4) {
			for _, w := range []time.Duration{time.Second, time.Minute, time.Minute + time.Microsecond} {
				id := Identity(seed, name, alg, w, "203.0.113.9")
				desc := fmt.Sprintf("%s/%d/%v", name, alg, w)
				if other, ok := seen[id]; ok {
					t.Fatalf("%s and %s share an identity", desc, other)
				}
				seen[id] = desc
			}
		}
	}
}
