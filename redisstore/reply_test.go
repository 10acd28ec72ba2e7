package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/rueidis"
)

func TestResultChecksInvariants(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    [5]int64
		want floodgate.Result
		ok   bool
	}{
		{"allowed", [5]int64{1, 3, 60_000_000, 0, 7}, floodgate.Result{Allowed: true, Remaining: 3, ResetAfter: time.Minute, Stamp: floodgate.Stamp{Epoch: 7}}, true},
		{"denied", [5]int64{0, 0, 1_500, 250, 0}, floodgate.Result{ResetAfter: 1500 * time.Microsecond, RetryAfter: 250 * time.Microsecond}, true},
		{"negative epoch", [5]int64{1, 0, 5, 0, -1}, floodgate.Result{}, false},
		{"epoch beyond 2^48", [5]int64{1, 0, 5, 0, 1 << 48}, floodgate.Result{}, false},
		{"allowed is 2", [5]int64{2, 0, 0, 0, 0}, floodgate.Result{}, false},
		{"allowed is -1", [5]int64{-1, 0, 0, 1, 0}, floodgate.Result{}, false},
		{"negative remaining", [5]int64{1, -1, 0, 0, 0}, floodgate.Result{}, false},
		{"negative reset", [5]int64{1, 0, -5, 0, 0}, floodgate.Result{}, false},
		{"negative retry", [5]int64{0, 0, 5, -5, 0}, floodgate.Result{}, false},
		{"reset overflows", [5]int64{1, 0, 1 << 62, 0, 0}, floodgate.Result{}, false},
		{"retry overflows", [5]int64{0, 0, 0, 1 << 62, 0}, floodgate.Result{}, false},
		{"allowed with retry", [5]int64{1, 0, 5, 5, 0}, floodgate.Result{}, false},
		{"denied without retry", [5]int64{0, 0, 5, 0, 0}, floodgate.Result{}, false},
	} {
		got, err := result(tc.v)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: result(%v) = %+v, %v; want %+v, ok=%v", tc.name, tc.v, got, err, tc.want, tc.ok)
		}
	}
}

// TestParseResultsRejectsMalformedReplies feeds the rueidis driver and
// the parser real replies of the wrong shape, produced by Redis itself.
func TestParseResultsRejectsMalformedReplies(t *testing.T) {
	rc := onClient(rawClient(t))
	for _, src := range []string{
		"return {1, 2, 3}",
		"return {1, 2, 3, 4, 5}",
		"return {5, 1, 'two', 3, 0, 0}",
		"return {5, 1, {2}, 3, 0, 0}",
		"return {5, 1, 2, 3, 0, 0, 1, 2, 3, 0, 0}",
		"return {5, 2, 0, 0, 0, 0}",
		"return {0, 1, 2, 3, 0, 0}",
		"return {-5, 1, 2, 3, 0, 0}",
		"return {}",
		"return 'OK'",
		"return 7",
		"return nil",
		"return redis.error_reply('boom')",
		"return {1, 2, 3, 1}",
	} {
		v, err := rc.Eval(ctx(t), newScript(src, true), nil, nil)
		var res [][]floodgate.Result
		if err == nil {
			res, err = parseValues(v, []int{1}, true)
		}
		if err == nil {
			t.Errorf("%s: parsed as %+v; want an error", src, res)
		}
	}
	// And the good shape, for two groups.
	v, err := rc.Eval(ctx(t), newScript("return {1700000000000000, 1, 9, 60000000, 0, 42, 0, 0, 10, 5, 0}", true), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := parseValues(v, []int{1, 1}, true)
	want := [][]floodgate.Result{
		{{Allowed: true, Remaining: 9, ResetAfter: time.Minute, Stamp: floodgate.Stamp{At: time.UnixMicro(1700000000000000), Epoch: 42}}},
		{{ResetAfter: 10 * time.Microsecond, RetryAfter: 5 * time.Microsecond}},
	}
	if err != nil || len(res) != 2 || res[0][0] != want[0][0] || res[1][0] != want[1][0] {
		t.Fatalf("good reply: %+v, %v; want %+v", res, err, want)
	}
}

// bogus is a client whose script calls run src instead: a server that
// answers nonsense.
type bogus struct {
	rueidis.Client
	src string
}

func (b *bogus) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if name := cmd.Commands()[0]; name == "EVALSHA" || name == "EVAL" {
		return b.Client.Do(ctx, b.Client.B().Eval().Script(b.src).Numkeys(0).Build())
	}
	return b.Client.Do(ctx, cmd)
}

func TestMalformedReplyIsAnError(t *testing.T) {
	hits := []floodgate.Hit{{Rule: mustRule(t, "bogus", 10, time.Minute, floodgate.SlidingWindow), Key: "k", Cost: 1}}
	for _, src := range []string{"return 'OK'", "return {1, 2}", "return {5, 1, 'x', 3, 0, 0}", "return nil", "return redis.error_reply('ERR boom')"} {
		s, err := New(ctx(t), Options{Client: &bogus{Client: rawClient(t), src: src}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Take(ctx(t), hits)
		if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "redisstore: store unavailable: ") {
			t.Errorf("%s: Take = %v; want an error wrapping ErrStoreUnavailable", src, err)
		}
		if _, err := s.Peek(ctx(t), hits); err == nil {
			t.Errorf("%s: Peek succeeded on a malformed reply", src)
		}
	}
}
