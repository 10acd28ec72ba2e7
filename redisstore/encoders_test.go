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

// scriptVariant returns src with old, which must occur exactly once,
// replaced by new: a test-only variant of a script, never sent by the
// store.
func scriptVariant(t *testing.T, src, old, new string) string {
	t.Helper()
	if n := strings.Count(src, old); n != 1 {
		t.Fatalf("the script holds %q %d times; the test replaces it once", old, n)
	}
	return strings.Replace(src, old, new, 1)
}

// TestRingEncodersAgree: take.lua encodes a ring with Redis's struct
// library where the server has one (Redis, Valkey: production) and in
// plain Lua where it has none (miniredis, the demo's). Both run here, on
// the real Redis: take.lua as it is, and a copy whose struct check is
// replaced by nil. Both copies read TIME from a test key instead, so that
// each step of a random walk runs both at the same instant, on two sets of
// keys, with the same arguments: every reply and every ring's bytes must
// be equal. The walk covers the quick and general paths, groups of one and
// two hits, several groups a call, peeks, limits that change, clocks that
// step back, rings that wrap, and rings of a year's window that are
// rebased (their entries' offsets from base would pass 2^48µs).
func TestRingEncodersAgree(t *testing.T) {
	c := rawClient(t)
	has, err := c.Do(ctx(t), c.B().Eval().Script("return rawget(_G, 'struct') ~= nil and 1 or 0").Numkeys(0).Build()).AsInt64()
	if err != nil || has != 1 {
		t.Fatalf("Redis's Lua has no struct library (%d, %v): the test needs production's encoder", has, err)
	}
	sx, sy := newStore(t), newStore(t) // struct, plain Lua: two key prefixes
	clock := sx.prefix + "now"
	fixed := scriptVariant(t, takeLua, "local time = redis.call('TIME')", "local time = redis.call('HMGET', '"+clock+"', 's', 'us')")
	withStruct := newScript(fixed, false)
	plain := newScript(scriptVariant(t, fixed, "rawget(_G, 'struct')", "nil"), false)

	const year = 365 * 24 * time.Hour
	type key struct {
		name   string
		window time.Duration
		limit  int64
	}
	keys := []*key{{"second", time.Second, 3}, {"minute", time.Minute, 5}, {"year", year, 4}}
	rule := func(k *key) floodgate.Rule { return mustRule(t, "enc", k.limit, k.window, floodgate.SlidingWindow) }
	rng := rand.New(rand.NewPCG(25, 24))
	now := int64(1_800_000_000_000_000) // µs, 2027
	var rebased, wrapped, steppedBack int
	var yearBase int64 // the year key's ring's base after the last step
	for step := range 2500 {
		switch p := rng.IntN(100); {
		case p < 25: // the same instant
		case p < 55:
			now += rng.Int64N(400_000)
		case p < 75:
			now += rng.Int64N(int64(2 * time.Second / time.Microsecond))
		case p < 85:
			now += rng.Int64N(int64(time.Minute / time.Microsecond))
		case p < 90:
			now -= rng.Int64N(int64(5 * time.Second / time.Microsecond))
			steppedBack++
		default:
			now += rng.Int64N(int64(year / 2 / time.Microsecond))
		}
		if now >= maxServerTime {
			t.Fatalf("step %d: the walk reached %dµs, past the scripts' range", step, now)
		}
		if rng.IntN(40) == 0 {
			k := keys[rng.IntN(len(keys))]
			k.limit = 1 + rng.Int64N(8)
		}
		err := c.Do(ctx(t), c.B().Hset().Key(clock).FieldValue().
			FieldValue("s", strconv.FormatInt(now/1e6, 10)).FieldValue("us", strconv.FormatInt(now%1e6, 10)).Build()).Error()
		if err != nil {
			t.Fatal(err)
		}
		record := rng.IntN(10) > 0
		ngroups := 1
		if record {
			ngroups = 1 + rng.IntN(3)
		}
		var args []string // a peek's group has the epoch 0
		var kx []string
		for g := range ngroups {
			var hits []floodgate.Hit
			for _, i := range rng.Perm(len(keys))[:1+rng.IntN(2)] {
				k := keys[i]
				hits = append(hits, floodgate.Hit{Rule: rule(k), Key: k.name, Cost: 1 + rng.Int64N(k.limit)})
			}
			var take uint64 // a peek names no take
			if record {
				take = uint64(step*4 + g + 1)
			}
			if kx, args, err = sx.appendGroup(kx, args, "take", group{take: take, hits: hits}); err != nil {
				t.Fatal(err)
			}
		}
		ky := make([]string, len(kx))
		for i, k := range kx {
			ky[i] = sy.prefix + strings.TrimPrefix(k, sx.prefix)
		}
		vx, errx := sx.eval(ctx(t), withStruct, kx, args)
		vy, erry := sy.eval(ctx(t), plain, ky, args)
		if errx != nil || erry != nil {
			t.Fatalf("step %d, args %q: struct %v; plain Lua %v", step, args, errx, erry)
		}
		if !slices.Equal(vx, vy) {
			t.Fatalf("step %d, args %q: struct replied %v, plain Lua %v", step, args, vx, vy)
		}
		for _, k := range keys {
			x, y := stateKey(sx, rule(k), k.name), stateKey(sy, rule(k), k.name)
			// Whatever real time passes, the keys stay: the walk's time is
			// its own.
			res := c.DoMulti(ctx(t), c.B().Get().Key(x).Build(), c.B().Get().Key(y).Build(),
				c.B().Persist().Key(x).Build(), c.B().Persist().Key(y).Build())
			bx, errx := res[0].AsBytes()
			by, erry := res[1].AsBytes()
			if rueidis.IsRedisNil(errx) != rueidis.IsRedisNil(erry) || !bytes.Equal(bx, by) {
				t.Fatalf("step %d, args %q: ring %s: struct wrote %x (%v), plain Lua %x (%v)", step, args, k.name, bx, errx, by, erry)
			}
			if len(bx) == 0 {
				continue
			}
			if _, head, _ := ring(t, c, x); head != 0 {
				wrapped++
			}
			if k.name == "year" {
				base := ringBase(t, c, x)
				if yearBase != 0 && base != yearBase && base != now {
					rebased++ // to its oldest live entry's time, not to now
				}
				yearBase = base
			}
		}
	}
	t.Logf("%d ring states wrapped, %d rebases of a ring with live entries, %d clock steps back", wrapped, rebased, steppedBack)
	if wrapped == 0 || rebased == 0 || steppedBack == 0 {
		t.Fatal("the walk must wrap rings, rebase a ring with live entries and step the clock back")
	}
}
