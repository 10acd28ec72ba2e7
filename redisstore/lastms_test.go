package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestRefundInTheKeysLastMillisecondKeepsOtherTakes: Redis counts a key's TTL in milliseconds and reports PTTL 0 during
// the key's whole last millisecond, while a ring's times are microseconds
// and may still be in the window then. A refund in that millisecond must
// remove its own take only: limit 4, take A (cost 3) and B (cost 1) at
// one instant, refund B while the key's PTTL is 0; A's 3 units still
// count, so a take of 4 is denied with 1 remaining, a take of 1 admitted,
// and the key lives until A's time leaves the window.
//
// The key's last millisecond is made with PEXPIRE 1 on a ring whose times
// have a minute to live, so that nothing else in the test depends on
// timing; the test waits until PTTL reports 0 and refunds at once. A
// refund that finds the key gone (it expired first) credits nothing, and
// the test tries again on a new key.
func TestRefundInTheKeysLastMillisecondKeepsOtherTakes(t *testing.T) {
	s := newStore(t)
	c := rawClient(t)
	r := mustRule(t, "lastms", 4, time.Minute, floodgate.SlidingWindow)
	for try := range 200 {
		k := "k" + strconv.Itoa(try)
		key := stateKey(s, r, k)
		a := []floodgate.Hit{{Rule: r, Key: k, Cost: 3}}
		b := []floodgate.Hit{{Rule: r, Key: k, Cost: 1}}
		res, err := runGroups(ctx(t), s, []group{{uint64(2*try + 1), a}, {uint64(2*try + 2), b}})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0][0].Allowed || !res[1][0].Allowed || res[1][0].Remaining != 0 {
			t.Fatalf("takes of 3 and 1 under a limit of 4: %+v", res)
		}
		if err := c.Do(ctx(t), c.B().Pexpire().Key(key).Milliseconds(1).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		pttl := int64(1)
		for pttl > 0 {
			if pttl, err = c.Do(ctx(t), c.B().Pttl().Key(key).Build()).AsInt64(); err != nil {
				t.Fatal(err)
			}
		}
		if pttl != 0 {
			continue // gone before the poll saw its last millisecond
		}
		keys, args, err := s.refundCall(receipts(b, res[1]))
		if err != nil {
			t.Fatal(err)
		}
		changed, err := s.eval(ctx(t), refundScript, keys, args)
		if err != nil {
			t.Fatal(err)
		}
		if changed[0] == 0 {
			continue // the key expired before the refund ran
		}
		// The refund found the key after PTTL had reported 0: it ran in the
		// key's last millisecond.
		if n := ringLen(t, c, key); n != 3 {
			t.Errorf("after the refund of B in the key's last millisecond the ring holds %d times; want A's 3", n)
		}
		if ttl, err := c.Do(ctx(t), c.B().Pttl().Key(key).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > time.Minute.Milliseconds() {
			t.Errorf("PTTL after the refund: %d, %v; want the key to live until A's time leaves the window (at most 60000 ms)", ttl, err)
		}
		all, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: k, Cost: 4}})
		if err != nil {
			t.Fatal(err)
		}
		if all[0].Allowed || all[0].Remaining != 1 {
			t.Errorf("a take of 4 after the refund: allowed %v, Remaining %d; want denied with 1 remaining (A's 3 units are in the window; admitting it makes 7 against a limit of 4)", all[0].Allowed, all[0].Remaining)
		}
		for i, want := range []bool{true, false} {
			one, err := s.Take(ctx(t), b)
			if err != nil {
				t.Fatal(err)
			}
			if one[0].Allowed != want || one[0].Remaining != 0 {
				t.Errorf("take of 1 number %d after the refund: allowed %v, Remaining %d; want allowed %v with 0 remaining", i+1, one[0].Allowed, one[0].Remaining, want)
			}
		}
		t.Logf("the refund ran in the key's last millisecond at try %d", try+1)
		return
	}
	t.Fatal("in 200 tries, no refund ran in its key's last millisecond: each found the key expired")
}
