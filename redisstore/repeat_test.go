package redisstore

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/redis/rueidis"
)

// TestRepeatedFiguresAgree: batchArgs sends a hit whose 5 values are
// those of the hit before it as "=" (take.lua's ARGV). A random walk of
// batches, each sent twice at the same instant on two sets of keys, once
// as batchArgs sends it and once with every hit's values written out,
// must get the same replies and leave the same states: batches of lone
// sliding-window takes of one rule (the fast path), of other algorithms
// (the general path), mixed, with groups of two hits, overdraw hits and
// rules whose figures repeat across groups.
func TestRepeatedFiguresAgree(t *testing.T) {
	c := rawClient(t)
	sx, sy := newStore(t), newStore(t)
	clock := sx.prefix + "now"
	script := newScript(scriptVariant(t, takeLua, "local time = redis.call('TIME')",
		"local time = redis.call('HMGET', '"+clock+"', 's', 'us')"), false)
	rules := []floodgate.Rule{
		mustRule(t, "rs", 3, time.Minute, floodgate.SlidingWindow),
		mustRule(t, "rt", 4, time.Second, floodgate.TokenBucket),
		mustRule(t, "rf", 3, time.Minute, floodgate.FixedWindow),
		mustRule(t, "rc", 5, time.Minute, floodgate.SlidingWindowCounter),
	}
	names := []string{"a", "b", "c"}
	rng := rand.New(rand.NewPCG(35, 4))
	now := int64(1_800_000_000_000_000)
	var repeated, fast int
	take := uint64(0)
	for step := range 600 {
		now += rng.Int64N(int64(3 * time.Second / time.Microsecond))
		if err := c.Do(ctx(t), c.B().Hset().Key(clock).FieldValue().FieldValue("s", strconv.FormatInt(now/1e6, 10)).
			FieldValue("us", strconv.FormatInt(now%1e6, 10)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		onlySliding := rng.IntN(3) == 0
		var bx, by []*call
		for range 1 + rng.IntN(6) {
			var hits []floodgate.Hit
			for _, i := range rng.Perm(len(rules) * len(names))[:1+rng.IntN(2)] {
				h := floodgate.Hit{Rule: rules[i%len(rules)], Key: names[i/len(rules)], Cost: 1 + rng.Int64N(2)}
				if rng.IntN(4) == 0 {
					h.Overdraw, h.Cost = true, 1+rng.Int64N(3)*3 // past the limits of 3 to 5
				}
				if !slices.ContainsFunc(hits, func(o floodgate.Hit) bool { return o.Rule == h.Rule && o.Key == h.Key }) {
					hits = append(hits, h)
				}
			}
			if onlySliding {
				hits = []floodgate.Hit{{Rule: rules[0], Key: names[rng.IntN(len(names))], Cost: 1}}
			}
			take++
			for _, b := range []struct {
				s     *Store
				batch *[]*call
			}{{sx, &bx}, {sy, &by}} {
				keys, args, err := b.s.appendGroup(nil, nil, "take", group{take: take, hits: hits})
				if err != nil {
					t.Fatal(err)
				}
				*b.batch = append(*b.batch, &call{keys: keys, args: args, hits: len(hits)})
			}
		}
		kx, ax := batchArgs(bx)
		var ky, ay []string
		for _, cl := range by {
			ky, ay = append(ky, cl.keys...), append(ay, cl.args...)
		}
		if slices.Contains(ax, "=") {
			repeated++
		}
		if len(ax) > 6 && len(ax) == 6+2*(len(kx)-1) {
			fast++ // one rule's lone sliding-window takes: 2 values a take after the first
		}
		vx, errx := sx.eval(ctx(t), script, kx, ax)
		vy, erry := sy.eval(ctx(t), script, ky, ay)
		if errx != nil || erry != nil || !slices.Equal(vx, vy) {
			t.Fatalf("step %d: args %q replied %v (%v); args %q replied %v (%v)", step, ax, vx, errx, ay, vy, erry)
		}
		for _, r := range rules {
			for _, n := range names {
				x, y := stateKey(sx, r, n), stateKey(sy, r, n)
				res := c.DoMulti(ctx(t), c.B().Get().Key(x).Build(), c.B().Get().Key(y).Build(),
					c.B().Persist().Key(x).Build(), c.B().Persist().Key(y).Build())
				gx, errx := res[0].AsBytes()
				gy, erry := res[1].AsBytes()
				if rueidis.IsRedisNil(errx) != rueidis.IsRedisNil(erry) || !bytes.Equal(gx, gy) {
					t.Fatalf("step %d, args %q: %s: %x (%v) against %x (%v)", step, ax, strings.TrimPrefix(x, sx.prefix), gx, errx, gy, erry)
				}
			}
		}
	}
	t.Logf("%d batches sent a hit as \"=\", %d of them lone sliding-window takes of one rule", repeated, fast)
	if repeated < 200 || fast < 100 {
		t.Fatalf("%d batches with \"=\", %d of one rule's lone sliding-window takes: the walk must cover both paths", repeated, fast)
	}
}
