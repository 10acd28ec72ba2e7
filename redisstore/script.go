package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/redis/rueidis"
)

var (
	//go:embed take.lua
	takeLua string
	//go:embed refund.lua
	refundLua string

	// takeScript records, so it must never be retried: EVALSHA, then EVAL
	// only on NOSCRIPT (the script did not run). rueidis retries only
	// commands marked retryable, which NewLuaScript's are not.
	takeScript = rueidis.NewLuaScript(takeLua)
	// peekScript is the same script in the mode that writes nothing, so a
	// retry after a network error is harmless.
	peekScript = rueidis.NewLuaScriptRetryable(takeLua)
	// refundScript is idempotent by its tombstones, but is not retried
	// either: a caller may retry Refund, the store does not.
	refundScript = rueidis.NewLuaScript(refundLua)
)

// maxScriptValue bounds the numbers a script computes with (2^51): with
// the server's clock near 2^51 microseconds, sums stay below 2^53, where
// Lua's doubles are exact. It caps windows and the token bucket's period
// at about 71 years.
const maxScriptValue = 1 << 51

// Suffixes of the state keys, by algorithm.
var suffixes = [...]string{
	floodgate.SlidingWindow: "s",
	floodgate.TokenBucket:   "t",
	floodgate.FixedWindow:   "f",
}

// group is one Take: its id and hits, all-or-nothing.
type group struct {
	id   string
	hits []floodgate.Hit
}

// Take implements [floodgate.Store] with one script call.
func (s *Store) Take(ctx context.Context, id string, hits []floodgate.Hit) ([]floodgate.Result, error) {
	res, err := s.run(ctx, "take", true, []group{{id: id, hits: hits}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// Peek implements [floodgate.Store]: the take script in a mode that
// writes nothing.
func (s *Store) Peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	res, err := s.run(ctx, "peek", false, []group{{hits: hits}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// Refund implements [floodgate.Store] with one script call. A sliding
// window removes the take's members; a token bucket or fixed window
// credits the take once, remembered by a tombstone key that lives as long
// as the take can weigh on the state.
func (s *Store) Refund(ctx context.Context, id string, hits []floodgate.Hit) error {
	if len(hits) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(hits))
	args := make([]string, 1, 1+4*len(hits))
	args[0] = id
	for i, h := range hits {
		p, err := params(h)
		if err != nil {
			return fmt.Errorf("redisstore: refund: hit %d: %w", i, err)
		}
		tag := s.tag(h.Rule.Name, h.Key)
		keys = append(keys, tag+p.suffix, tag+"r:"+p.suffix+":"+id)
		var a, ttl int64
		switch h.Rule.Algorithm {
		case floodgate.TokenBucket:
			a, ttl = p.b, ceilDiv(max(p.windowUS, p.a*p.b), 1000)
		case floodgate.FixedWindow:
			a, ttl = p.windowUS, ceilDiv(p.windowUS, 1000)
		}
		args = append(args, p.suffix, strconv.FormatInt(p.cost, 10), strconv.FormatInt(a, 10), strconv.FormatInt(ttl, 10))
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return err
	}
	if err := sameSlot(c, keys); err != nil {
		return fmt.Errorf("redisstore: refund: %w", err)
	}
	if err := exec(ctx, c, refundScript, keys, args).Error(); err != nil {
		return s.fail("refund", err)
	}
	return nil
}

// Reset implements [floodgate.Store]: it deletes the key's state under
// rule. Tombstones of earlier refunds are left to expire.
func (s *Store) Reset(ctx context.Context, rule floodgate.Rule, key string) error {
	if int(rule.Algorithm) >= len(suffixes) {
		return fmt.Errorf("redisstore: reset: %w: unknown algorithm %v", floodgate.ErrInvalidRule, rule.Algorithm)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return err
	}
	k := s.tag(rule.Name, key) + suffixes[rule.Algorithm]
	if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
		return s.fail("reset", err)
	}
	return nil
}

// run checks groups in one script call, recording each group that is
// allowed when record is set, and returns one result slice per group.
func (s *Store) run(ctx context.Context, op string, record bool, groups []group) ([][]floodgate.Result, error) {
	n := 0
	for _, g := range groups {
		n += len(g.hits)
	}
	keys := make([]string, 0, n)
	args := make([]string, 2, 2+2*len(groups)+4*n)
	args[0] = "0"
	if record {
		args[0] = "1"
	}
	args[1] = strconv.Itoa(len(groups))
	sizes := make([]int, len(groups))
	for gi, g := range groups {
		sizes[gi] = len(g.hits)
		if len(g.hits) == 0 {
			return nil, fmt.Errorf("redisstore: %s: %w: no hits to check", op, floodgate.ErrInvalidHit)
		}
		args = append(args, g.id, strconv.Itoa(len(g.hits)))
		first := len(keys)
		for i, h := range g.hits {
			p, err := params(h)
			if err != nil {
				return nil, fmt.Errorf("redisstore: %s: hit %d: %w", op, i, err)
			}
			k := s.tag(h.Rule.Name, h.Key) + p.suffix
			for j := first; j < len(keys); j++ {
				if keys[j] == k {
					return nil, fmt.Errorf("redisstore: %s: %w: hits %d and %d name the same key under rule %s", op, floodgate.ErrInvalidHit, j-first, i, h.Rule.Name)
				}
			}
			keys = append(keys, k)
			args = append(args, p.suffix, strconv.FormatInt(p.cost, 10), strconv.FormatInt(p.a, 10), strconv.FormatInt(p.b, 10))
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := sameSlot(c, keys); err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	script := takeScript
	if !record {
		script = peekScript
	}
	msgs, err := exec(ctx, c, script, keys, args).ToArray()
	if err != nil {
		return nil, s.fail(op, err)
	}
	res, err := parseResults(msgs, sizes)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w: %w", op, floodgate.ErrStoreUnavailable, err)
	}
	return res, nil
}

// exec runs script. rueidis panics when a Cluster client builds a command
// whose keys are in different slots; sameSlot rules that out first, and
// exec turns any such panic into an error all the same: a bad call must
// never crash the service.
func exec(ctx context.Context, c rueidis.Client, script *rueidis.Lua, keys, args []string) (res rueidis.RedisResult) {
	defer func() {
		if p := recover(); p != nil {
			res = rueidis.NewErrorResult(fmt.Errorf("rueidis panicked: %v", p))
		}
	}()
	return script.Exec(ctx, c, keys, args)
}

// ErrCrossSlot reports a call whose keys live in different Redis Cluster
// slots, which one script cannot touch: on a Cluster, every hit of one
// check must currently share a slot. It wraps floodgate.ErrStoreUnavailable,
// since the store could not decide.
var ErrCrossSlot = fmt.Errorf("%w: keys in different Redis Cluster slots", floodgate.ErrStoreUnavailable)

// sameSlot checks, on a Cluster client, that keys share one slot.
func sameSlot(c rueidis.Client, keys []string) error {
	if len(keys) < 2 || c.Mode() != rueidis.ClientModeCluster {
		return nil
	}
	first := keySlot(keys[0])
	for _, k := range keys[1:] {
		if keySlot(k) != first {
			return fmt.Errorf("%w: %q and %q", ErrCrossSlot, keys[0], k)
		}
	}
	return nil
}

// keySlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

// tag returns the start of every key of (rule name, key), up to and
// including the ":" after the hash tag: "<prefix>{<name>:<encoded key>}:".
// The prefix and rule name hold no braces and keyenc.Encode never returns
// one, so the tag is the key's only hash tag whatever the client sent.
func (s *Store) tag(name, key string) string {
	return s.prefix + "{" + name + ":" + keyenc.Encode(key) + "}:"
}

// hitParams is what the scripts need of a hit.
type hitParams struct {
	suffix   string // "s", "t" or "f"
	cost     int64
	a, b     int64 // limit and window (µs); token bucket: capacity and interval (µs)
	windowUS int64
}

// params checks that h can be computed exactly by the scripts and returns
// their arguments.
func params(h floodgate.Hit) (hitParams, error) {
	r := h.Rule
	if int(r.Algorithm) >= len(suffixes) {
		return hitParams{}, fmt.Errorf("%w: rule %q: unknown algorithm %v", floodgate.ErrInvalidRule, r.Name, r.Algorithm)
	}
	w := int64(r.Window / time.Microsecond)
	if r.Limit < 1 || w < 1 || w > maxScriptValue || r.Limit > maxScriptValue {
		return hitParams{}, fmt.Errorf("%w: rule %q: limit %d per %v is outside what the Redis store computes exactly (limit 1 to 2^51, window 1µs to 2^51µs)", floodgate.ErrInvalidRule, r.Name, r.Limit, r.Window)
	}
	p := hitParams{suffix: suffixes[r.Algorithm], cost: h.Cost, a: r.Limit, b: w, windowUS: w}
	if p.cost == 0 {
		p.cost = 1
	}
	capacity := r.Capacity()
	if p.cost < 1 || p.cost > capacity {
		return hitParams{}, fmt.Errorf("%w: rule %q: cost %d is not within 1 to the capacity %d", floodgate.ErrInvalidHit, r.Name, p.cost, capacity)
	}
	if r.Algorithm == floodgate.TokenBucket {
		interval := ceilDiv(w, r.Limit) // rounded up: rounding never admits more
		if capacity > maxScriptValue/interval {
			return hitParams{}, fmt.Errorf("%w: rule %q: burst %d times an interval of %dµs is outside what the Redis store computes exactly (2^51µs)", floodgate.ErrInvalidRule, r.Name, capacity, interval)
		}
		p.a, p.b = capacity, interval
	}
	return p, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// errMalformed reports a script reply that does not have the documented
// shape.
var errMalformed = errors.New("malformed script reply")

// parseResults turns the take script's reply, 4 integers per hit, into
// one result slice per group of sizes[i] hits. It checks the reply's shape
// and the results' invariants and never panics.
func parseResults(msgs []rueidis.RedisMessage, sizes []int) ([][]floodgate.Result, error) {
	n := 0
	for _, size := range sizes {
		n += size
	}
	if len(msgs) != 4*n {
		return nil, fmt.Errorf("%w: %d values for %d hits, want %d", errMalformed, len(msgs), n, 4*n)
	}
	out := make([][]floodgate.Result, len(sizes))
	all := make([]floodgate.Result, n)
	for i := range all {
		var v [4]int64
		for j := range v {
			x, err := msgs[4*i+j].ToInt64()
			if err != nil {
				return nil, fmt.Errorf("%w: value %d: %w", errMalformed, 4*i+j, err)
			}
			v[j] = x
		}
		r, err := result(v)
		if err != nil {
			return nil, fmt.Errorf("%w: hit %d: %w", errMalformed, i, err)
		}
		all[i] = r
	}
	for gi, size := range sizes {
		out[gi], all = all[:size:size], all[size:]
	}
	return out, nil
}

// result checks one hit's four integers (allowed, remaining, reset_after
// and retry_after in µs) and converts them.
func result(v [4]int64) (floodgate.Result, error) {
	const maxUS = math.MaxInt64 / int64(time.Microsecond)
	allowed, remaining, reset, retry := v[0], v[1], v[2], v[3]
	switch {
	case allowed != 0 && allowed != 1:
		return floodgate.Result{}, fmt.Errorf("allowed is %d, want 0 or 1", allowed)
	case remaining < 0:
		return floodgate.Result{}, fmt.Errorf("remaining is %d", remaining)
	case reset < 0 || reset > maxUS:
		return floodgate.Result{}, fmt.Errorf("reset_after is %dµs", reset)
	case retry < 0 || retry > maxUS:
		return floodgate.Result{}, fmt.Errorf("retry_after is %dµs", retry)
	case allowed == 1 && retry != 0:
		return floodgate.Result{}, fmt.Errorf("allowed with retry_after %dµs", retry)
	case allowed == 0 && retry == 0:
		return floodgate.Result{}, errors.New("denied with retry_after 0")
	}
	return floodgate.Result{
		Allowed:    allowed == 1,
		Remaining:  remaining,
		ResetAfter: time.Duration(reset) * time.Microsecond,
		RetryAfter: time.Duration(retry) * time.Microsecond,
	}, nil
}
