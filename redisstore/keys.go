package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/keyenc"
	"github.com/floodgate-rl/floodgate/internal/rediskeys"
)

// The key layout is internal/rediskeys'; these bind its names here.
var (
	suffixes   = rediskeys.ScriptLetters
	keyLetters = rediskeys.Letters
)

func stateSuffix(r floodgate.Rule) string { return rediskeys.Suffix(r) }

func storedTag(prefix, name, stored string) string { return rediskeys.Tag(prefix, name, stored) }

func isStored(k string) bool { return rediskeys.IsStored(k) }

// tag returns the start of every key of (rule name, key), up to and
// including the ":" after the hash tag: "<prefix>{<name>:<encoded key>}:".
// The prefix and rule name hold no braces and keyenc.Encode never returns
// one, so the tag is the key's only hash tag whatever the client sent.
func (s *Store) tag(name, key string) string {
	return storedTag(s.prefix, name, keyenc.Encode(key))
}

// PeekStored is [Store.Peek] for keys as the store keeps them: each hit's
// Key is a stored key as the key layout holds it (the client's key, or the
// digest that stands for it), and is not encoded again. It lets a tool
// that lists the store's keys peek at a hashed key, whose client key it
// cannot know, under the rule the service would judge it by. Like Peek it
// writes nothing; on a Cluster it makes one call per slot, concurrently.
// A Key that no client key encodes to is an error wrapping
// floodgate.ErrInvalidHit.
func (s *Store) PeekStored(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	for i, h := range hits {
		if !isStored(h.Key) {
			return nil, fmt.Errorf("redisstore: peek stored: hit %d: %w: %q is not a key as the store keeps it", i, floodgate.ErrInvalidHit, h.Key)
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if !s.conn.Cluster() || len(hits) < 2 {
		res, err := s.peekStored(ctx, hits)
		if !errors.Is(err, errCrossSlot) { // see Take
			return res, err
		}
	}
	// One call per slot of the keys' hash tags, concurrently.
	bySlot := map[uint16][]int{}
	for i, h := range hits {
		slot := keySlot(storedTag(s.prefix, h.Rule.Name, h.Key))
		bySlot[slot] = append(bySlot[slot], i)
	}
	out := make([]floodgate.Result, len(hits))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, idx := range bySlot {
		wg.Go(func() {
			g := make([]floodgate.Hit, len(idx))
			for j, i := range idx {
				g[j] = hits[i]
			}
			res, err := s.peekStored(ctx, g)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			for j, i := range idx {
				out[i] = res[j]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// peekStored is peek (script.go) for stored keys of one slot: the same
// script and arguments, with each state key named by the hit's stored key
// where appendGroup names it by the key's encoding.
func (s *Store) peekStored(ctx context.Context, hits []floodgate.Hit) ([]floodgate.Result, error) {
	keys, args, err := s.appendGroup(make([]string, 0, len(hits)), make([]string, 0, 1+5*len(hits)), "peek", group{hits: hits})
	if err != nil {
		return nil, err
	}
	for i, h := range hits {
		keys[i] = storedTag(s.prefix, h.Rule.Name, h.Key) + stateSuffix(h.Rule)
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
