package floodgate

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/bounds"
)

// TestValidMatchesProblems: Validate's fast path (valid) accepts exactly
// the rules in which its full account (problems) finds nothing, on every
// combination of each field's values at and around its bounds, and on
// random rules near them: a rule the fast path lets through unchecked
// would reach the stores invalid, and one it refuses wrongly would fail
// with no problem to report.
func TestValidMatchesProblems(t *testing.T) {
	counterEdge := int64(maxCounterProduct / int64(time.Hour/time.Microsecond)) // the first refused per hour
	names := []string{"", "a", "pix", strings.Repeat("n", bounds.NameLen), strings.Repeat("n", bounds.NameLen+1), "a{b", "Z-9._z", "é", "a b"}
	limits := []int64{-1, 0, 1, 2, 1000, bounds.SlidingLimit, bounds.SlidingLimit + 1, counterEdge - 1, counterEdge, bounds.Limit, bounds.Limit + 1, 1 << 62}
	windows := []time.Duration{-time.Second, 0, time.Millisecond - time.Microsecond, time.Millisecond, time.Millisecond + 1, time.Second, time.Hour, 24 * time.Hour, bounds.Window, bounds.Window + time.Microsecond}
	bursts := []int64{-1, 0, 1, 2, 10 * 366, 1 << 40, bounds.Limit, bounds.Limit + 1}
	algs := []Algorithm{SlidingWindow, TokenBucket, FixedWindow, SlidingWindowCounter, SlidingWindowCounter + 1, 255}
	n, accepted := 0, 0
	check := func(r Rule) {
		t.Helper()
		n++
		err := r.problems()
		if r.valid() != (err == nil) {
			t.Fatalf("%#v: valid() = %v, problems() = %v", r, r.valid(), err)
		}
		if got := r.Validate(); (got == nil) != (err == nil) {
			t.Fatalf("%#v: Validate() = %v, problems() = %v", r, got, err)
		}
		if err == nil {
			accepted++
		}
	}
	for _, name := range names {
		for _, limit := range limits {
			for _, w := range windows {
				for _, b := range bursts {
					for _, a := range algs {
						check(Rule{Name: name, Limit: limit, Window: w, Algorithm: a, Burst: b})
					}
				}
			}
		}
	}
	// Random rules near the bounds that depend on two fields at once: a
	// counter's limit times its window, and a burst's refill time.
	rng := rand.New(rand.NewPCG(28, 1))
	for range 200_000 {
		w := time.Duration(rng.Int64N(int64(bounds.Window/time.Microsecond))+1) * time.Microsecond
		if rng.IntN(2) == 0 {
			w = time.Duration(rng.Int64N(int64(48*time.Hour/time.Microsecond))+1000) * time.Microsecond
		}
		us := int64(w / time.Microsecond)
		limit := rng.Int64N(4*maxCounterProduct/us+2) - 1
		burst := int64(0)
		if rng.IntN(2) == 0 && limit > 0 {
			edge := limit * int64(bounds.Window/w)
			burst = max(0, edge+rng.Int64N(2*limit+2)-limit)
		}
		check(Rule{Name: "r", Limit: limit, Window: w, Algorithm: algs[rng.IntN(len(algs))], Burst: burst})
	}
	if accepted < n/100 {
		t.Fatalf("only %d of %d rules accepted: the cases miss the valid side of the bounds", accepted, n)
	}
	t.Logf("%d rules, %d valid", n, accepted)
}

// TestValidRulesRemembersOnlyValid: the Limiter's memory of valid rules
// answers as valid does for every rule, whichever slots valid rules
// filled first: each valid rule of a set, then each of its one-field
// variants (an invalid name, limit, window, algorithm or burst, and valid
// ones that differ in one field), then the rule again. A memory that
// compared fewer fields than a Rule has would take a variant for the
// rule it remembers and let it through. It allocates at most once per
// slot, however many rules it sees.
func TestValidRulesRemembersOnlyValid(t *testing.T) {
	type set struct {
		r        Rule
		variants []Rule
	}
	var sets []set
	for i := range 200 {
		alg := Algorithm(i % len(algorithmNames))
		r := Rule{Name: "r" + strconv.Itoa(i%7), Limit: int64(1 + i%50), Window: time.Duration(1+i%9) * time.Second, Algorithm: alg}
		if alg == TokenBucket && i%3 == 0 {
			r.Burst = r.Limit * 2
		}
		if !r.valid() {
			t.Fatalf("%v: not valid", r)
		}
		variants := []Rule{r, r, r, r, r, r, r, r, r, r}
		variants[0].Name = r.Name + "{"
		variants[1].Limit = 0
		variants[2].Window = 0
		variants[3].Algorithm = Algorithm(len(algorithmNames))
		variants[4].Burst = -1
		variants[5].Burst = r.Limit + 1 // valid for a token bucket only
		variants[6].Name = r.Name + "x"
		variants[7].Limit = r.Limit + 1
		variants[8].Window = r.Window + time.Microsecond // a window of µs: valid
		variants[9].Algorithm = (r.Algorithm + 1) % Algorithm(len(algorithmNames))
		sets = append(sets, set{r, variants})
	}
	var v validRules
	checked := 0
	for _, s := range sets {
		if !v.valid(&s.r) {
			t.Errorf("%v: validRules says invalid", s.r)
		}
		for _, w := range s.variants {
			if got, want := v.valid(&w), w.valid(); got != want {
				t.Errorf("validRules.valid(%+v) = %v after %v, want %v", w, got, s.r, want)
			}
			checked++
		}
		if !v.valid(&s.r) {
			t.Errorf("%v: validRules says invalid", s.r)
		}
	}
	// What a fresh cache allocates for every rule once: a copy per slot
	// at most. The mean of several runs, each on a fresh cache, which the
	// allocations of other tests' goroutines sway less than a single
	// count of the process's mallocs.
	caches, run := make([]validRules, 11), 0 // AllocsPerRun's warm-up and 10 runs
	allocs := testing.AllocsPerRun(10, func() {
		fresh := &caches[run]
		run++
		for _, s := range sets {
			fresh.valid(&s.r)
			for i := range s.variants {
				fresh.valid(&s.variants[i])
			}
		}
	})
	if allocs > float64(len(v.slots)) {
		t.Errorf("%v allocations for %d rules, want at most %d", allocs, checked, len(v.slots))
	}
	filled := 0
	for i := range v.slots {
		if v.slots[i].Load() != nil {
			filled++
		}
	}
	if filled < 2 {
		t.Errorf("%d slots of %d filled by %d rules: slotOf spreads nothing", filled, len(v.slots), len(sets))
	}
}
