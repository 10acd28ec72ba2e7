package floodgate

import (
	"errors"
	"fmt"
)

// Errors that callers branch on. Every error the package returns wraps one
// of them (check with [errors.Is]); store errors are also wrapped, so
// errors.Is(err, context.DeadlineExceeded) works too.
//
// ErrStoreUnavailable and ErrClosed are wrapped by stores and then by the
// Limiter, so their text names no package, as io.EOF's does not: a store
// that times out reads "floodgate: take: redisstore: store unavailable:
// context deadline exceeded", each layer once.
var (
	// ErrInvalidRule reports a rule that cannot be used: empty name, limit
	// or window below the minimum, unknown algorithm.
	ErrInvalidRule = errors.New("floodgate: invalid rule")
	// ErrInvalidHit reports a hit that cannot be checked: empty or too long
	// key, negative cost, or a cost above the rule's capacity.
	ErrInvalidHit = errors.New("floodgate: invalid hit")
	// ErrStoreUnavailable reports that the store did not answer in time or
	// failed. The request was not decided; what to do is the caller's
	// failure policy (deny, allow, or decide locally).
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrClosed reports a call to a store after Close.
	ErrClosed = errors.New("store closed")
	// ErrCorruptState reports that a store could not use the state it
	// keeps for a key of the check (a value it did not write, a value of
	// another type): that check was not decided, and checks of other keys
	// are decided as usual. It wraps ErrStoreUnavailable, so the
	// caller's failure policy applies; but the store answered, so a
	// circuit breaker does not count it as the store's failure. Stores
	// keep the key and their own key layout out of its text, which may
	// reach clients.
	ErrCorruptState = fmt.Errorf("%w: corrupt state", ErrStoreUnavailable)
)
