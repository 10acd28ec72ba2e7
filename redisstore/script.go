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
	"github.com/floodgate-rl/floodgate/internal/algo"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
)

// The scripts: Redis scripts cannot include one another, so each is sent
// as ring.lua (the time, integer arithmetic, TTLs and the ring's codec)
// followed by its own file, refund's and renew's with rewrite.lua (a ring
// read whole and written anew) between.
var (
	//go:embed ring.lua
	ringLua string
	//go:embed take.lua
	takeBody string
	//go:embed rewrite.lua
	rewriteLua string
	//go:embed refund.lua
	refundBody string

	takeLua   = ringLua + takeBody
	refundLua = ringLua + rewriteLua + refundBody

	// takeScript records, so it must never be retried: EVALSHA, then EVAL
	// only on NOSCRIPT (the script did not run).
	takeScript = newScript(takeLua, false)
	// peekScript is the same script, sent with the epoch 0 that records
	// nothing, so a retry after a network error is harmless.
	peekScript = newScript(takeLua, true)
	// refundScript is idempotent by its tombstones, but is not retried
	// either: a caller may retry Refund, the store does not.
	refundScript = newScript(refundLua, false)
)

// maxServerTime bounds the server time the scripts compute with: 2^52µs
// (the year 2112). floodgate.Rule.Validate keeps every period below
// 2^52µs, so sums with the time stay below 2^53, where Lua's doubles are
// exact.
const maxServerTime = 1 << 52

// group is one Take: its name (takename.go; zero for a Peek, which
// creates no state) and hits, all-or-nothing.
type group struct {
	take uint64
	hits []floodgate.Hit
}

// peek runs the take script with the epoch 0, which writes nothing, for
// hits of one slot.
func (s *Store) peek(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	keys, args, err := s.appendGroup(make([]string, 0, len(hits)), make([]string, 0, 1+5*len(hits)), "peek", group{hits: hits})
	if err != nil {
		return nil, err
	}
	v, err := s.eval(ctx, peekScript, keys, args)
	if err != nil {
		return nil, err
	}
	res, err := parseValues(v, []int{len(hits)}, false)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return res[0], nil
}

// refund runs the refund script for receipts of one slot.
func (s *Store) refund(ctx context.Context, receipts []floodgate.Receipt) error {
	keys, args, err := s.refundCall(receipts)
	if err != nil {
		return err
	}
	_, err = s.eval(ctx, refundScript, keys, args)
	return err
}

// errCrossSlot reports a script call whose keys live in different Redis
// Cluster slots, which one script cannot touch. The store splits every
// check by slot before it calls a script (see cluster.go), so this error
// means a bug. It wraps floodgate.ErrStoreUnavailable, since the store
// could not decide.
var errCrossSlot = fmt.Errorf("%w: keys in different Redis Cluster slots", floodgate.ErrStoreUnavailable)

// sameSlot checks that keys share one Cluster slot.
func sameSlot(keys []string) error {
	if len(keys) < 2 {
		return nil
	}
	first := keySlot(keys[0])
	for _, k := range keys[1:] {
		if keySlot(k) != first {
			// Slots, not keys: the text may reach clients.
			return fmt.Errorf("redisstore: %w: slots %d and %d", errCrossSlot, first, keySlot(k))
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

// hitParams is what the scripts need of a hit.
type hitParams struct {
	alg    string // "s", "t", "f" or "c"
	suffix string // stateSuffix
	cost   int64
	a, b   int64 // limit and window (µs); token bucket: capacity and interval (µs)
}

// params returns the scripts' arguments of h. floodgate.Rule.Validate
// keeps every figure within what the scripts compute exactly (below 2^51,
// sums below 2^53). The Limiter has validated h (floodgate.Store); params
// checks again, with the same Validate, for callers of the Store itself:
// a hit outside the contract must be an error, never a panic or a silent
// miscount. Take and Peek cache the result per rule and cost
// (paramStrings), so the hot path pays nothing for it.
func params(h floodgate.Hit) (hitParams, error) {
	r := h.Rule
	if err := r.Validate(); err != nil {
		return hitParams{}, err
	}
	if most := algo.MaxCost(h); h.Cost < 1 || h.Cost > most {
		return hitParams{}, fmt.Errorf("%w: rule %q: cost %d is not within 1 to %d", floodgate.ErrInvalidHit, r.Name, h.Cost, most)
	}
	p := hitParams{alg: suffixes[r.Algorithm], suffix: stateSuffix(r), cost: h.Cost, a: r.Limit, b: int64(r.Window / time.Microsecond)}
	if r.Algorithm == floodgate.TokenBucket {
		p.a, p.b = r.Capacity(), int64(algo.Interval(r)/time.Microsecond)
	}
	return p, nil
}

// errMalformed reports a script reply that does not have the documented
// shape.
var errMalformed = errors.New("malformed script reply")

// parseValues turns the take script's reply (the server time, then 5
// integers per hit) into one result slice per group of sizes[i] hits; when
// recorded, each hit the script recorded (an epoch not zero: an allowed
// hit, or an overdraw hit past its limit) gets its stamp. It checks the
// reply's shape and the results' invariants and never panics.
func parseValues(v []int64, sizes []int, recorded bool) ([][]floodgate.Result, error) {
	n := 0
	for _, size := range sizes {
		n += size
	}
	if len(v) != 1+5*n {
		return nil, fmt.Errorf("%w: %d values for %d hits, want %d", errMalformed, len(v), n, 1+5*n)
	}
	if v[0] <= 0 || v[0] > maxServerTime {
		return nil, fmt.Errorf("%w: server time %dµs", errMalformed, v[0])
	}
	at := time.UnixMicro(v[0])
	out := make([][]floodgate.Result, len(sizes))
	all := make([]floodgate.Result, n)
	for i := range all {
		r, err := result([5]int64(v[1+5*i : 6+5*i]))
		if err != nil {
			return nil, fmt.Errorf("%w: hit %d: %w", errMalformed, i, err)
		}
		if recorded && r.Stamp.Epoch != 0 {
			r.Stamp.At = at
		} else {
			r.Stamp = floodgate.Stamp{}
		}
		all[i] = r
	}
	for gi, size := range sizes {
		out[gi], all = all[:size:size], all[size:]
	}
	return out, nil
}

// result checks one hit's five integers (allowed, remaining, reset_after
// and retry_after in µs, epoch) and converts them.
func result(v [5]int64) (floodgate.Result, error) {
	const maxUS = math.MaxInt64 / int64(time.Microsecond)
	allowed, remaining, reset, retry, epoch := v[0], v[1], v[2], v[3], v[4]
	switch {
	case allowed != 0 && allowed != 1:
		return floodgate.Result{}, fmt.Errorf("allowed is %d, want 0 or 1", allowed)
	case allowed == 1 && remaining < 0:
		return floodgate.Result{}, fmt.Errorf("allowed with remaining %d", remaining)
	case reset < 0 || reset > maxUS:
		return floodgate.Result{}, fmt.Errorf("reset_after is %dµs", reset)
	case retry < 0 || retry > maxUS:
		return floodgate.Result{}, fmt.Errorf("retry_after is %dµs", retry)
	case allowed == 1 && retry != 0:
		return floodgate.Result{}, fmt.Errorf("allowed with retry_after %dµs", retry)
	case allowed == 0 && retry == 0:
		return floodgate.Result{}, errors.New("denied with retry_after 0")
	case epoch < 0 || epoch > maxEpoch:
		return floodgate.Result{}, fmt.Errorf("epoch is %d", epoch)
	}
	return floodgate.Result{
		Allowed:    allowed == 1,
		Remaining:  remaining,
		ResetAfter: time.Duration(reset) * time.Microsecond,
		RetryAfter: time.Duration(retry) * time.Microsecond,
		Stamp:      floodgate.Stamp{Epoch: uint64(epoch)},
	}, nil
}

// maxEpoch bounds the epochs the scripts store: 48 bits, the sliding
// window ring's header field (and exact in Lua's doubles).
const maxEpoch = 1<<48 - 1

// named sets the name t of the take that gave res in the stamp of each hit
// it recorded (those with an epoch).
func named(res []floodgate.Result, t uint64) {
	for i := range res {
		if res[i].Stamp.Epoch != 0 {
			res[i].Stamp.Take = t
		}
	}
}

// epochOf returns the epoch of a state that the take named t creates: 48
// bits of the FNV-1a hash of takeID(t), never zero, computed without
// building the string. Names are unique (takename.go), so two states of
// one key share an epoch with a chance of about 2^-48, and a refund is
// then credited to a state that does not hold its take.
func epochOf(t uint64) uint64 {
	var buf [13]byte // the longest base-36 uint64
	id := strconv.AppendUint(buf[:0], t, 36)
	h := uint64(14695981039346656037)
	for _, c := range id {
		h ^= uint64(c)
		h *= 1099511628211
	}
	if h &= maxEpoch; h == 0 {
		h = 1
	}
	return h
}

// refundCall returns the keys and arguments of the refund script for
// receipts (see refund.lua): each receipt's take name (Stamp.Take) names
// its tombstone, and the script needs no other trace of the take.
func (s *Store) refundCall(receipts []floodgate.Receipt) (keys, args []string, err error) {
	keys = make([]string, 0, 2*len(receipts))
	args = make([]string, 0, 5*len(receipts))
	for i, r := range receipts {
		p, err := params(r.Hit)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: refund: hit %d: %w", i, err)
		}
		tag := s.tag(r.Hit.Rule.Name, r.Hit.Key)
		keys = append(keys, tag+p.suffix, rediskeys.Tombstone(tag, p.suffix, takeID(r.Stamp.Take)))
		// A receipt no take gave (zero time) credits nothing: time 0 is
		// older than any window.
		at := max(0, min(r.Stamp.At.UnixMicro(), maxServerTime))
		args = append(args, p.alg, strconv.FormatInt(p.cost, 10), strconv.FormatInt(p.b, 10),
			strconv.FormatInt(at, 10), strconv.FormatUint(r.Stamp.Epoch, 10))
	}
	return keys, args, nil
}
