package keyfunc_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/keyfunc"
)

type keyFunc func(map[string]string) string

func field(name string) keyFunc { return func(m map[string]string) string { return m[name] } }

func TestJoinAndFirst(t *testing.T) {
	fs := []keyFunc{field("a"), field("b")}
	join, first := keyfunc.Join(fs...), keyfunc.First(fs...)
	fs[0] = field("c") // the caller reuses its slice: the functions keep theirs
	cases := []struct {
		in          map[string]string
		join, first string
	}{
		{map[string]string{"a": "x", "b": "y"}, "1:x1:y", "0:x"},
		{map[string]string{"a": "1:x", "b": ""}, "", "0:1:x"},
		{map[string]string{"b": "y", "c": "z"}, "", "1:y"},
		{map[string]string{}, "", ""},
		{map[string]string{"a": "x1:", "b": "y"}, "3:x1:1:y", "0:x1:"},
	}
	for _, tc := range cases {
		if got := join(tc.in); got != tc.join {
			t.Errorf("Join(%v) = %q, want %q", tc.in, got, tc.join)
		}
		if got := first(tc.in); got != tc.first {
			t.Errorf("First(%v) = %q, want %q", tc.in, got, tc.first)
		}
	}
}
