package overrides_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/overrides"
)

// BenchmarkSetOverride measures one lookup, what every decision of a
// Limiter with overrides pays: in an empty set, in a set of 10,000
// overrides of another rule, of the same rule but other keys (a miss),
// and of the key itself (a hit).
func BenchmarkSetOverride(b *testing.B) {
	const n = 10_000
	api := floodgate.Rule{Name: "api", Limit: 100, Window: time.Minute}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	build := func(rule, prefix string) *overrides.Set {
		es := make([]overrides.Entry, n)
		for i := range es {
			r := api
			r.Name, r.Limit = rule, 1000
			es[i] = overrides.Entry{Rule: r, Key: prefix + strconv.Itoa(i)}
		}
		s, err := overrides.NewSet(es...)
		if err != nil || s.Len() != n {
			b.Fatalf("set of %d: %v", s.Len(), err)
		}
		return s
	}
	empty, err := overrides.NewSet()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  *overrides.Set
		hit  bool
	}{
		{"empty", empty, false},
		{"10k-other-rule", build("web", "user-"), false},
		{"10k-key-miss", build("api", "vip-"), false},
		{"10k-key-hit", build("api", "user-"), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, ok := c.set.Override(api, keys[(i*7919)%n]); ok != c.hit {
					b.Fatalf("Override = %v; want %v", ok, c.hit)
				}
			}
		})
	}
}
