package bank

import (
	"errors"
	"testing"
)

func TestParseDocument(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"529.982.247-25", "52998224725", true},
		{"52998224725", "52998224725", true},
		{"111.444.777-35", "11144477735", true},
		{"529.982.247-24", "", false}, // wrong second digit
		{"111.111.111-11", "", false}, // all equal
		{"5299822472", "", false},     // 10 digits
		{"11.222.333/0001-81", "11222333000181", true},
		{"12.ABC.345/01DE-35", "12ABC34501DE35", true}, // alphanumeric CNPJ (2026)
		{"12.abc.345/01de-35", "12ABC34501DE35", true},
		{"12.ABC.345/01DE-36", "", false},
		{"11.222.333/0001-8A", "", false},
		{"00.000.000/0000-00", "", false},
		{"529\x00982", "", false},
		{"５２９", "", false}, // full-width digits are not ASCII
		{"", "", false},
	} {
		got, err := ParseDocument(tc.in)
		if tc.ok != (err == nil) || string(got) != tc.want {
			t.Errorf("ParseDocument(%q) = %q, %v; want %q (ok=%v)", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("ParseDocument(%q): %v does not wrap ErrInvalidDocument", tc.in, err)
		}
	}
}

func FuzzParseDocument(f *testing.F) {
	for _, s := range []string{"529.982.247-25", "12.ABC.345/01DE-35", "11.222.333/0001-81", "", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDocument(s)
		if err != nil {
			return
		}
		// A valid document is canonical: parsing it again gives itself.
		again, err := ParseDocument(string(d))
		if err != nil || again != d || (len(d) != 11 && len(d) != 14) {
			t.Fatalf("ParseDocument(%q) = %q, but re-parsing gives %q, %v", s, d, again, err)
		}
	})
}
