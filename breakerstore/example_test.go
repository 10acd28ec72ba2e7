package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/breakerstore"
)

// deadStore fails every call, like a Redis that is down.
type deadStore struct{}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func (deadStore) Take(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, errRefused
}
func (deadStore) Peek(context.Context, []floodgate.Hit) ([]floodgate.Result, error) {
	return nil, errRefused
}
func (deadStore) Refund(context.Context, []floodgate.Receipt) error {
	return errRefused
}
func (deadStore) Reset(context.Context, floodgate.Rule, string) error { return errRefused }
func (deadStore) Renew(context.Context, []floodgate.Receipt) ([]floodgate.Stamp, error) {
	return nil, errRefused
}

// After three consecutive failures the breaker opens: later calls fail at
// once, without reaching the store, until the cooldown lets a probe through.
func Example() {
	store, err := breakerstore.New(deadStore{}, breakerstore.Options{
		Failures: 3,
		OnStateChange: func(from, to breakerstore.State) {
			fmt.Printf("breaker: %v -> %v\n", from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	limiter, _ := floodgate.New(store, floodgate.Options{})
	rule, _ := floodgate.NewRule("pix", 10, time.Minute, floodgate.SlidingWindow)
	for i := range 5 {
		_, err := limiter.Allow(context.Background(), rule, "account-42")
		fmt.Printf("call %d: unavailable=%v breaker-open=%v\n", i+1,
			errors.Is(err, floodgate.ErrStoreUnavailable), errors.Is(err, breakerstore.ErrOpen))
	}
	fmt.Println("state:", store.State())
	// Output:
	// call 1: unavailable=true breaker-open=false
	// call 2: unavailable=true breaker-open=false
	// breaker: closed -> open
	// call 3: unavailable=true breaker-open=false
	// call 4: unavailable=true breaker-open=true
	// call 5: unavailable=true breaker-open=true
	// state: open
}
