package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/rueidis"
)

// A limiter whose limits every replica of a service shares through Redis.
// (This example needs a Redis, so it is compiled but not run.)
func Example() {
	ctx := context.Background()
	store, err := redisstore.New(ctx, redisstore.Options{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err) // only bad options fail: a Redis that is down is not an error here
	}
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		log.Fatal(err)
	}
	login, err := floodgate.NewRule("login", 10, time.Minute, floodgate.SlidingWindow)
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.Allow(ctx, login, "192.0.2.1")
	switch {
	case errors.Is(err, floodgate.ErrStoreUnavailable):
		// Redis is down or slow: apply the route's failure policy.
	case err != nil:
		log.Fatal(err)
	case !d.Allowed:
		fmt.Printf("429, retry in %v\n", d.RetryAfter)
	}
}

// A store on an existing rueidis client, here for a Redis Cluster. The
// store does not close a client it was given.
func ExampleNew_client() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{"192.0.2.10:6379", "192.0.2.11:6379", "192.0.2.12:6379"},
		DisableCache: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(context.Background(), redisstore.Options{Client: client, Prefix: "bank:rl:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_ = store // pass to floodgate.New
}
