package redisstore

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/bounds"
	"github.com/redis/rueidis"
)

// span is take.lua's SPAN: a ring's entries are offsets from its base,
// below 2^48µs.
const span = 1 << 48

// ringServer is a server to write rings on: a real Redis, whose scripts
// use the struct library and whose TIME moves, or miniredis, whose
// scripts use the plain-Lua codecs and whose TIME is frozen.
type ringServer struct {
	name  string
	store *Store
	raw   rueidis.Client
	// margin is how far under 2^48µs before TIME a base must lie for the
	// test's takes to fit it: TIME moves on a real server.
	margin time.Duration
}

func ringServers(t *testing.T) []ringServer {
	t.Helper()
	mini := miniredis.RunT(t)
	mini.SetTime(time.Now())
	mc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mini.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Close)
	ms, err := New(ctx(t), Options{Client: mc, Prefix: randomPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	return []ringServer{
		{"redis", newStore(t), rawClient(t), 10 * time.Second},
		{"miniredis", ms, mc, time.Microsecond},
	}
}

// writeRing writes a sliding window's ring in take.lua's layout: times in
// admission order, the oldest in slot head, the cursor first, every time
// (and tfirst and newest) as an offset from base.
func writeRing(t *testing.T, c rueidis.Client, key string, epoch uint64, head, first int, base int64, times []int64) {
	t.Helper()
	le := func(b []byte, x uint64, n int) []byte {
		for range n {
			b = append(b, byte(x))
			x >>= 8
		}
		return b
	}
	off := func(x int64) uint64 {
		if x < base || x-base >= span {
			t.Fatalf("time %d does not fit base %d", x, base)
		}
		return uint64(x - base)
	}
	count := len(times)
	slots := make([]int64, count)
	for i, x := range times {
		slots[(head+i)%count] = x
	}
	var v []byte
	for _, x := range slots {
		v = le(v, off(x), 6)
	}
	tfirst := times[count-1]
	if first < count {
		tfirst = times[first]
	}
	v = le(v, epoch, 6)
	v = le(v, uint64(head), 3)
	v = le(v, uint64(count), 3)
	v = le(v, uint64(first), 3)
	v = le(v, uint64(base), 7)
	v = le(v, off(tfirst), 6)
	v = le(v, off(times[count-1]), 6)
	if err := c.Do(ctx(t), c.B().Set().Key(key).Value(rueidis.BinaryString(v)).Px(time.Hour).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// ringBase reads a ring's base from its header.
func ringBase(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(ctx(t), c.B().Getrange().Key(key).Start(-34).End(-1).Build()).AsBytes()
	if err != nil || len(v) != 34 {
		t.Fatalf("GETRANGE %s: %d bytes, %v", key, len(v), err)
	}
	var x int64
	for i := 21; i >= 15; i-- {
		x = x<<8 | int64(v[i])
	}
	return x
}

// TestRingRebase writes full, wrapped rings whose base lies just under
// 2^48µs before the server's TIME (a take still fits it) and exactly or
// more than 2^48µs before it (a take must rebase the ring), then takes,
// denies, refunds, peeks and takes again through them, on a real Redis and
// on miniredis: every figure is an exact log's, the base moves only when a
// time would not fit it, and then to the oldest live entry's time.
func TestRingRebase(t *testing.T) {
	const sec = int64(time.Second / time.Microsecond)
	for _, srv := range ringServers(t) {
		for _, rebase := range []bool{false, true} {
			name := srv.name + "/fits"
			if rebase {
				name = srv.name + "/rebases"
			}
			t.Run(name, func(t *testing.T) {
				s, c := srv.store, srv.raw
				// One key per subtest: the servers' stores are shared, and
				// so would be the refund's tombstone.
				r := mustRule(t, "rebase", 5, time.Minute, floodgate.SlidingWindow)
				k := name
				key := stateKey(s, r, k)
				now0 := serverTime(t, c)
				base := now0 - span + srv.margin.Microseconds()
				if rebase {
					base = now0 - span
				}
				rel := func(ds ...int64) []int64 {
					out := make([]int64, len(ds))
					for i, d := range ds {
						out[i] = now0 + d*sec
					}
					return out
				}
				// Full and wrapped (the oldest in slot 2), the cursor at
				// the oldest: two times have left the window since.
				writeRing(t, c, key, 42, 2, 0, base, rel(-70, -65, -50, -40, -30))
				hit := func(cost int64) []floodgate.Hit { return []floodgate.Hit{{Rule: r, Key: k, Cost: cost}} }

				res, err := s.Take(ctx(t), hit(1))
				if err != nil {
					t.Fatal(err)
				}
				at1 := res[0].Stamp.At.UnixMicro()
				if got := res[0]; !got.Allowed || got.Remaining != 1 || got.ResetAfter != time.Minute || got.Stamp.Epoch != 42 {
					t.Fatalf("take of 1 beside 3 live times of 5: %+v; want allowed, remaining 1, reset 1m, epoch 42", got)
				}
				_, _, times := ring(t, c, key)
				wantTimes, wantBase := append(rel(-65, -50, -40, -30), at1), base
				if rebase {
					wantTimes, wantBase = append(rel(-50, -40, -30), at1), now0-50*sec
				}
				if b := ringBase(t, c, key); !slices.Equal(times, wantTimes) || b != wantBase {
					t.Fatalf("after the take: times %v, base %d; want %v, base %d", times, b, wantTimes, wantBase)
				}

				// Denied: 4 live, cost 2. Room comes when the oldest live
				// (now0-50s) leaves; the log is full until at1 does.
				before := serverTime(t, c)
				res, err = s.Take(ctx(t), hit(2))
				if err != nil {
					t.Fatal(err)
				}
				after := serverTime(t, c)
				got := res[0]
				frees := now0 + 10*sec
				if got.Allowed || got.Remaining != 1 || got.RetryAfter < usDur(frees-after) || got.RetryAfter > usDur(frees-before) ||
					got.ResetAfter-got.RetryAfter != usDur(at1+60*sec-frees) {
					t.Fatalf("take of 2 beside 4 live times of 5: %+v; want denied, remaining 1, retry until %d (TIME %d..%d), reset until %d", got, frees, before, after, at1+60*sec)
				}
				if _, _, times2 := ring(t, c, key); !slices.Equal(times2, wantTimes) {
					t.Fatalf("a denial wrote the ring: %v, want %v", times2, wantTimes)
				}

				// The refund drops the take's time and the times that
				// left the window; the base stays.
				if err := s.Refund(ctx(t), []floodgate.Receipt{{Hit: hit(1)[0], Stamp: floodgate.Stamp{At: time.UnixMicro(at1), Epoch: 42}}}); err != nil {
					t.Fatal(err)
				}
				if _, _, times = ring(t, c, key); !slices.Equal(times, rel(-50, -40, -30)) || ringBase(t, c, key) != wantBase {
					t.Fatalf("after the refund: times %v, base %d; want %v, base %d", times, ringBase(t, c, key), rel(-50, -40, -30), wantBase)
				}
				if res, err = s.Peek(ctx(t), hit(1)); err != nil || !res[0].Allowed || res[0].Remaining != 1 {
					t.Fatalf("peek of 1 beside 3 live times of 5: %+v, %v; want allowed, remaining 1", res, err)
				}

				// It fills: written whole, the base kept (it still fits).
				if res, err = s.Take(ctx(t), hit(2)); err != nil || !res[0].Allowed || res[0].Remaining != 0 {
					t.Fatalf("take of 2 beside 3 live times of 5: %+v, %v; want allowed, remaining 0", res, err)
				}
				at3 := res[0].Stamp.At.UnixMicro()
				if _, head, times := ring(t, c, key); head != 0 || !slices.Equal(times, append(rel(-50, -40, -30), at3, at3)) || ringBase(t, c, key) != wantBase {
					t.Fatalf("after filling: head %d, times %v, base %d; want head 0, %v, base %d", head, times, ringBase(t, c, key), append(rel(-50, -40, -30), at3, at3), wantBase)
				}
			})
		}
	}
}

// TestRingTooOldForItsBase writes a ring of a window longer than 2^48µs
// whose oldest live time is 2^48µs old: no base fits it and a new time, so
// a take fails with an error (and writes nothing) rather than miscount,
// while a peek, which writes nothing, still answers exactly.
func TestRingTooOldForItsBase(t *testing.T) {
	for _, srv := range ringServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s, c := srv.store, srv.raw
			r := mustRule(t, "decade", 5, bounds.Window, floodgate.SlidingWindow)
			key := stateKey(s, r, "k")
			now0 := serverTime(t, c)
			base := now0 - span
			newest := now0 - int64(time.Second/time.Microsecond)
			writeRing(t, c, key, 7, 0, 0, base, []int64{base, newest})
			stored := func() []byte {
				v, err := c.Do(ctx(t), c.B().Get().Key(key).Build()).AsBytes()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			was := stored()
			_, err := s.Take(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
			if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "8.9 years") {
				t.Fatalf("take: %v; want an error wrapping ErrStoreUnavailable that says the entry is 8.9 years old", err)
			}
			if !bytes.Equal(stored(), was) {
				t.Fatal("the failed take changed the ring")
			}
			res, err := s.Peek(ctx(t), []floodgate.Hit{{Rule: r, Key: "k", Cost: 1}})
			if err != nil || !res[0].Allowed || res[0].Remaining != 2 || res[0].ResetAfter != bounds.Window {
				t.Fatalf("peek of 1 beside 2 live times of 5: %+v, %v; want allowed, remaining 2, reset %v", res, err, bounds.Window)
			}
		})
	}
}

func usDur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
