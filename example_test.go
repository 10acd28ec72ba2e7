package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// Ten PIX transfers a minute per account: the eleventh is denied and told
// when to come back.
func Example() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		panic(err)
	}
	pix, err := floodgate.NewRule("pix", 10, time.Minute, floodgate.SlidingWindow)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 11; i++ {
		d, err := limiter.Allow(ctx, pix, "account-42")
		if err != nil {
			panic(err) // the store failed: apply the route's failure policy
		}
		if i >= 10 {
			fmt.Printf("transfer %d: allowed=%v remaining=%d retry in ~%v\n", i, d.Allowed, d.Remaining, d.RetryAfter.Round(time.Minute))
		}
	}
	// Output:
	// transfer 10: allowed=true remaining=0 retry in ~0s
	// transfer 11: allowed=false remaining=0 retry in ~1m0s
}

// A rule known when the routes are set up is prepared once: Prepare
// validates it, and each decision of the Prepared skips that check.
func ExampleLimiter_Prepare() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		panic(err)
	}
	pix, err := limiter.Prepare(floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute})
	if err != nil {
		panic(err) // an invalid rule: a mistake in the configuration
	}
	d, err := pix.Allow(context.Background(), "account-42")
	if err != nil {
		panic(err) // the store failed: apply the route's failure policy
	}
	fmt.Printf("allowed=%v remaining=%d of %d per %v\n", d.Allowed, d.Remaining, d.Limit, d.Window)
	// Output:
	// allowed=true remaining=9 of 10 per 1m0s
}

// Login is checked by client IP and by account together: both count the
// attempt, or neither does, and the worst of the two is reported.
func ExampleLimiter_Check() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	byIP, _ := floodgate.NewRule("login-ip", 10, 10*time.Minute, floodgate.SlidingWindow)
	byAccount, _ := floodgate.NewRule("login-account", 5, 10*time.Minute, floodgate.SlidingWindow)
	ctx := context.Background()
	var d floodgate.Decision
	for i := range 6 {
		ip := fmt.Sprintf("192.0.2.%d", i+1) // a botnet: a new IP each time
		d, _ = limiter.Check(ctx,
			floodgate.Hit{Rule: byIP, Key: ip},
			floodgate.Hit{Rule: byAccount, Key: "12345678909"})
	}
	fmt.Println(d.Allowed, d.Policy)
	// Output: false login-account
}

// After a successful login, refund the account's attempt so that the owner
// never locks themselves out.
func ExampleLimiter_Refund() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	rule, _ := floodgate.NewRule("login-account", 1, time.Minute, floodgate.SlidingWindow)
	ctx := context.Background()
	d, _ := limiter.Allow(ctx, rule, "acct")
	_ = limiter.Refund(ctx, d) // the password was right
	d, _ = limiter.Allow(ctx, rule, "acct")
	fmt.Println(d.Allowed)
	// Output: true
}

// A model's answer costs the tokens it produced, known only once it is
// written: the charge is recorded even past the limit, and the account
// owes the excess, worked off at the rule's rate, before its next request.
func ExampleHit_overdraw() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	tokens, _ := floodgate.NewRule("llm-tokens", 1000, time.Minute, floodgate.TokenBucket)
	ctx := context.Background()
	d, _ := limiter.Allow(ctx, tokens, "acct") // the request: 1 token up front
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.Check(ctx, floodgate.Hit{Rule: tokens, Key: "acct", Cost: 1499, Overdraw: true}) // the answer's tokens
	fmt.Println(d.Allowed, d.Recorded, d.Remaining, d.RetryAfter.Round(time.Second))
	d, _ = limiter.Allow(ctx, tokens, "acct")
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 999
	// false true -500 30s
	// false -500
}

// At most two reports render at once per account, however long each
// takes: a Concurrency rule's hit is a lease, held until it is refunded,
// renewed while the work runs longer than its time to live (30 s here).
func ExampleLimiter_Renew() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, _ := floodgate.New(store, floodgate.Options{})
	rendering := floodgate.Rule{Name: "reports", Limit: 2, Window: 30 * time.Second, Algorithm: floodgate.Concurrency}
	ctx := context.Background()

	a, _ := limiter.Allow(ctx, rendering, "acct")
	b, _ := limiter.Allow(ctx, rendering, "acct")
	c, _ := limiter.Allow(ctx, rendering, "acct")
	fmt.Println(a.Allowed, b.Allowed, c.Allowed) // the third waits for a slot

	a, _ = limiter.Renew(ctx, a) // a long report keeps its slot
	fmt.Println(a.Allowed)
	_ = limiter.Refund(ctx, b) // a report done: its slot is free
	_ = limiter.Refund(ctx, b) // released once, however often
	c, _ = limiter.Allow(ctx, rendering, "acct")
	fmt.Println(c.Allowed, c.Remaining)
	// Output:
	// true true false
	// true
	// true 0
}

// Escrow for a hot key: a tenant's limit that every replica charges. The
// first hit is a plain take; from the second, the Limiter holds a lease
// of the key's quota and decides from memory, with the figures a plain
// take would report. Close gives back the units the lease did not use,
// so the store then holds exactly the hits admitted.
func ExampleEscrow() {
	store := memstore.New(memstore.Options{}) // redisstore in production
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{
		Escrow: floodgate.Escrow{Period: 100 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	tenant := floodgate.Rule{Name: "tenant", Limit: 1000, Window: time.Minute}
	ctx := context.Background()
	var d floodgate.Decision
	for range 30 {
		if d, err = limiter.Allow(ctx, tenant, "acme"); err != nil {
			panic(err)
		}
	}
	fmt.Println("after 30 hits: remaining", d.Remaining)
	if err := limiter.Close(); err != nil {
		panic(err)
	}
	direct, _ := floodgate.New(store, floodgate.Options{})
	p, _ := direct.Peek(ctx, floodgate.Hit{Rule: tenant, Key: "acme"})
	fmt.Println("the store, after Close: remaining", p.Remaining+1)
	// Output:
	// after 30 hits: remaining 970
	// the store, after Close: remaining 970
}
