package redisstore

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestParseValuesBounds: the server time and each figure are accepted up
// to their bounds and refused one past them, and the reply is split into
// groups of the sizes asked for, in order.
func TestParseValuesBounds(t *testing.T) {
	hit := []int64{1, 2, 1000, 0, 9}
	reply := func(now int64, hits ...[]int64) []int64 {
		v := []int64{now}
		for _, h := range hits {
			v = append(v, h...)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		now  int64
		ok   bool
	}{
		{"time 1µs", 1, true},
		{"time 0", 0, false},
		{"time 2^52", maxServerTime, true},
		{"time past 2^52", maxServerTime + 1, false},
	} {
		res, err := parseValues(reply(tc.now, hit), []int{1}, true)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %+v, %v; want ok=%v", tc.name, res, err, tc.ok)
			continue
		}
		if tc.ok && !res[0][0].Stamp.At.Equal(time.UnixMicro(tc.now)) {
			t.Errorf("%s: stamp %v, want the server time %v", tc.name, res[0][0].Stamp.At, time.UnixMicro(tc.now))
		}
	}
	// Three hits in groups of 2 and 1; the second hit denied.
	denied := []int64{0, 0, 500, 250, 0}
	res, err := parseValues(reply(7, hit, denied, []int64{1, 0, 3, 0, 4}), []int{2, 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]floodgate.Result{
		{
			{Allowed: true, Remaining: 2, ResetAfter: time.Millisecond, Stamp: floodgate.Stamp{At: time.UnixMicro(7), Epoch: 9}},
			{ResetAfter: 500 * time.Microsecond, RetryAfter: 250 * time.Microsecond},
		},
		{{Allowed: true, ResetAfter: 3 * time.Microsecond, Stamp: floodgate.Stamp{At: time.UnixMicro(7), Epoch: 4}}},
	}
	if len(res) != 2 || !slices.Equal(res[0], want[0]) || !slices.Equal(res[1], want[1]) {
		t.Fatalf("groups of 2 and 1: %+v; want %+v", res, want)
	}
	if cap(res[0]) != 2 {
		t.Errorf("the first group has capacity %d: appending to it would overwrite the next group", cap(res[0]))
	}
	// Not recorded (a peek): no stamp at all, even with an epoch.
	res, err = parseValues(reply(7, hit), []int{1}, false)
	if err != nil || res[0][0].Stamp != (floodgate.Stamp{}) {
		t.Fatalf("a peek: %+v, %v; want no stamp", res, err)
	}
	// The number of values must be 1 + 5 per hit, whatever the grouping.
	for _, sizes := range [][]int{{2}, {1, 1}, {0}, {2, 2}} {
		if _, err := parseValues(reply(7, hit, hit, hit), sizes, true); err == nil {
			t.Errorf("3 hits parsed as groups %v", sizes)
		}
	}
	if _, err := parseValues(reply(7, hit, hit, hit), []int{2}, true); err == nil || !strings.Contains(err.Error(), "16 values for 2 hits, want 11") {
		t.Errorf("a reply of 16 values for 2 hits: %v; want the error to say that 2 hits need 11", err)
	}
}

// TestResultBounds: each figure at its bound is accepted, one past it is
// refused.
func TestResultBounds(t *testing.T) {
	const maxUS = math.MaxInt64 / int64(time.Microsecond)
	for _, tc := range []struct {
		name string
		v    [5]int64
		ok   bool
	}{
		{"nothing remaining", [5]int64{1, 0, 0, 0, 1}, true},
		{"reset at the bound", [5]int64{1, 0, maxUS, 0, 1}, true},
		{"reset past it", [5]int64{1, 0, maxUS + 1, 0, 1}, false},
		{"retry at the bound", [5]int64{0, 0, 0, maxUS, 0}, true},
		{"retry past it", [5]int64{0, 0, 0, maxUS + 1, 0}, false},
		{"retry 1µs", [5]int64{0, 0, 0, 1, 0}, true},
		{"epoch 0", [5]int64{1, 0, 0, 0, 0}, true},
		{"epoch 2^48-1", [5]int64{1, 0, 0, 0, maxEpoch}, true},
	} {
		r, err := result(tc.v)
		if (err == nil) != tc.ok {
			t.Errorf("%s: result(%v) = %+v, %v; want ok=%v", tc.name, tc.v, r, err, tc.ok)
		}
		if tc.ok && (r.ResetAfter != time.Duration(tc.v[2])*time.Microsecond || r.RetryAfter != time.Duration(tc.v[3])*time.Microsecond || r.Stamp.Epoch != uint64(tc.v[4])) {
			t.Errorf("%s: result(%v) = %+v", tc.name, tc.v, r)
		}
	}
}

// TestParams: the scripts get the limit and the window in µs, or for a
// token bucket its capacity and emission interval in µs; a cost must lie
// within 1 and the capacity.
func TestParams(t *testing.T) {
	rule := func(limit int64, window time.Duration, alg floodgate.Algorithm, burst int64) floodgate.Rule {
		r := mustRule(t, "p", limit, window, alg)
		if burst > 0 {
			r.Burst = burst
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	for _, tc := range []struct {
		name string
		hit  floodgate.Hit
		want hitParams
	}{
		{"sliding", floodgate.Hit{Rule: rule(10, time.Minute, floodgate.SlidingWindow, 0), Cost: 1}, hitParams{"s", "w:1m0s", 1, 10, 60_000_000}},
		{"fixed at the limit", floodgate.Hit{Rule: rule(10, 1500*time.Millisecond, floodgate.FixedWindow, 0), Cost: 10}, hitParams{"f", "f:1.5s", 10, 10, 1_500_000}},
		{"counter", floodgate.Hit{Rule: rule(7, time.Second, floodgate.SlidingWindowCounter, 0), Cost: 2}, hitParams{"c", "c:1s", 2, 7, 1_000_000}},
		// 3 per second: T = 333334µs, rounded up.
		{"token bucket", floodgate.Hit{Rule: rule(3, time.Second, floodgate.TokenBucket, 0), Cost: 3}, hitParams{"t", "t:1s", 3, 3, 333_334}},
		{"token bucket with a burst", floodgate.Hit{Rule: rule(3, time.Second, floodgate.TokenBucket, 5), Cost: 5}, hitParams{"t", "t:1s", 5, 5, 333_334}},
	} {
		got, err := params(tc.hit)
		if err != nil || got != tc.want {
			t.Errorf("%s: params = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		hit  floodgate.Hit
	}{
		{"cost 0", floodgate.Hit{Rule: rule(10, time.Minute, floodgate.SlidingWindow, 0), Cost: 0}},
		{"cost past the limit", floodgate.Hit{Rule: rule(10, time.Minute, floodgate.FixedWindow, 0), Cost: 11}},
		{"cost past the burst", floodgate.Hit{Rule: rule(3, time.Second, floodgate.TokenBucket, 5), Cost: 6}},
		{"invalid rule", floodgate.Hit{Rule: floodgate.Rule{Name: "p", Limit: 0, Window: time.Minute}, Cost: 1}},
	} {
		if got, err := params(tc.hit); err == nil {
			t.Errorf("%s: params = %+v; want an error", tc.name, got)
		} else if !errors.Is(err, floodgate.ErrInvalidHit) && !errors.Is(err, floodgate.ErrInvalidRule) {
			t.Errorf("%s: %v; want ErrInvalidHit or ErrInvalidRule", tc.name, err)
		}
	}
}

// TestKeySlotHashTags: the hash tag is the text between the first "{" and
// the first "}" after it, when not empty. Slots from CLUSTER KEYSLOT of
// Redis 7.
func TestKeySlotHashTags(t *testing.T) {
	for key, want := range map[string]uint16{
		"":                     0,
		"A":                    6373,
		"a{b}c":                3300,
		"{}":                   15257,
		"{a":                   10276,
		"a}":                   5921,
		"}{a}":                 15495,
		"{{a}}":                10276,
		"x{}y{z}":              15453,
		"{a}{b}":               15495,
		"fg:{r:k}:s":           507,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestSameSlot(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		ok   bool
	}{
		{nil, true},
		{[]string{"a"}, true},
		{[]string{"{a}x", "{a}y", "}{a}"}, true},
		{[]string{"{a}x", "{a}y", "{b}z"}, false},
		{[]string{"{b}z", "{a}x"}, false},
	} {
		err := sameSlot(tc.keys)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errCrossSlot)) {
			t.Errorf("sameSlot(%q) = %v; want ok=%v", tc.keys, err, tc.ok)
		}
	}
}

// TestEpochOf: 48 bits of the FNV-1a hash of the name's base-36 text,
// never zero, the 13 characters of the longest name included.
func TestEpochOf(t *testing.T) {
	for _, tc := range []struct {
		take uint64
		want uint64
	}{
		{10, 242221223898252},        // "a"
		{1, 189444665744124},         // "1"
		{1<<64 - 1, 270341078893410}, // "3w5e11264sgsf"
	} {
		if got := epochOf(tc.take); got != tc.want {
			t.Errorf("epochOf(%d) = %d, want %d", tc.take, got, tc.want)
		}
	}
}

// TestRefundCall: two keys per receipt (the state and the tombstone named
// by the receipt's own take name, in base 36), and per receipt the
// algorithm, cost, window or interval in µs, the take's time in µs
// (clamped to the scripts' range) and epoch.
func TestRefundCall(t *testing.T) {
	s := &Store{prefix: "p:"}
	tb := mustRule(t, "tb", 4, time.Second, floodgate.TokenBucket)
	fw := mustRule(t, "fw", 4, time.Minute, floodgate.FixedWindow)
	receipts := []floodgate.Receipt{
		{Hit: floodgate.Hit{Rule: tb, Key: "k", Cost: 2}, Stamp: floodgate.Stamp{At: time.UnixMicro(1_700_000_000_000_123), Epoch: 42, Take: 1<<64 - 1}},
		{Hit: floodgate.Hit{Rule: fw, Key: "j", Cost: 1}}, // no stamp: time 0
		{Hit: floodgate.Hit{Rule: fw, Key: "l", Cost: 3}, Stamp: floodgate.Stamp{At: time.UnixMicro(maxServerTime + 5), Epoch: 1, Take: 36}}, // clamped
	}
	keys, args, err := s.refundCall(receipts)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{
		"p:{tb:k}:t:1s", "p:{tb:k}:r:t:1s:3w5e11264sgsf",
		"p:{fw:j}:f:1m0s", "p:{fw:j}:r:f:1m0s:0",
		"p:{fw:l}:f:1m0s", "p:{fw:l}:r:f:1m0s:10",
	}
	wantArgs := []string{
		"t", "2", "250000", "1700000000000123", "42",
		"f", "1", "60000000", "0", "0",
		"f", "3", "60000000", "4503599627370496", "1",
	}
	if !slices.Equal(keys, wantKeys) || !slices.Equal(args, wantArgs) {
		t.Fatalf("refundCall:\nkeys %q\nargs %q\nwant\nkeys %q\nargs %q", keys, args, wantKeys, wantArgs)
	}
	bad := append(receipts[:1:1], floodgate.Receipt{Hit: floodgate.Hit{Rule: fw, Key: "k", Cost: 5}})
	if _, _, err := s.refundCall(bad); err == nil || !strings.Contains(err.Error(), "hit 1") {
		t.Fatalf("a receipt whose cost passes the limit: %v; want an error naming hit 1", err)
	}
}

// TestReservationLifeOfEachAlgorithm: a reservation weighs for a window,
// two for a sliding-window counter, or the time a token bucket refills the
// cost; receipts together weigh as long as the longest.
func TestReservationLifeOfEachAlgorithm(t *testing.T) {
	c := floodgate.Hit{Rule: mustRule(t, "c", 10, time.Minute, floodgate.SlidingWindowCounter), Cost: 1}
	tb := floodgate.Hit{Rule: mustRule(t, "t", 10, 10*time.Second, floodgate.TokenBucket), Cost: 3}
	s := floodgate.Hit{Rule: mustRule(t, "s", 10, 2*time.Second, floodgate.SlidingWindow), Cost: 1}
	for _, tc := range []struct {
		hits []floodgate.Hit
		want time.Duration
	}{
		{nil, 0},
		{[]floodgate.Hit{c}, 2 * time.Minute},
		{[]floodgate.Hit{s, tb}, 3 * time.Second},
		{[]floodgate.Hit{tb, s}, 3 * time.Second},
		{[]floodgate.Hit{s, c, tb}, 2 * time.Minute},
	} {
		if got := reservationLife(receipts(tc.hits, nil)); got != tc.want {
			t.Errorf("reservationLife(%v) = %v, want %v", tc.hits, got, tc.want)
		}
	}
}

// TestParamStringsCacheIsBounded: the formatted arguments are cached for
// the first maxCachedParams rules and costs only, and are right for the
// rest too.
func TestParamStringsCacheIsBounded(t *testing.T) {
	s := &Store{}
	for i := range maxCachedParams + 10 {
		h := floodgate.Hit{Rule: mustRule(t, "p", int64(i+1), time.Second, floodgate.FixedWindow), Cost: 1}
		p, err := s.paramStrings(h)
		if err != nil || p.a != strconv.Itoa(i+1) || p.b != "1000000" || p.cost != "1" || p.alg != "f" {
			t.Fatalf("rule %d: %+v, %v", i, p, err)
		}
	}
	n := 0
	s.batch.params.Range(func(_, _ any) bool { n++; return true })
	if n != maxCachedParams {
		t.Fatalf("%d entries cached; want %d", n, maxCachedParams)
	}
}
