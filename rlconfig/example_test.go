package rlconfig_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// Live limits from an envoyproxy/ratelimit file with one floodgate
// extension (an exact sliding window for the whole domain): every
// account makes 2 PIX transfers a minute, and account acct-42 makes 3.
// A [rlconfig.Watcher]'s Config method in place of the func would follow
// the file as it changes.
func Example() {
	cfg, err := rlconfig.Parse(map[string][]byte{"bank.yaml": []byte(`
domain: bank
algorithm: sliding_window
descriptors:
  - key: pix
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: pix
    value: acct-42
    rate_limit: {unit: minute, requests_per_unit: 3}
`)}, rlconfig.Options{})
	if err != nil {
		fmt.Println(err) // every problem, each with its file and path
		return
	}
	fmt.Print(cfg)

	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{
		Overrides: rlconfig.NewRules("bank", func() *rlconfig.Config { return cfg }),
	})
	if err != nil {
		panic(err)
	}
	pix := floodgate.Rule{Name: "pix", Limit: 10, Window: time.Minute} // the file's limits replace the 10
	for _, account := range []string{"acct-1", "acct-42"} {
		allowed := 0
		for range 5 {
			d, err := limiter.Allow(context.Background(), pix, account)
			if err != nil {
				panic(err) // the store failed
			}
			if d.Allowed {
				allowed++
			}
		}
		fmt.Printf("%s: %d of 5 allowed\n", account, allowed)
	}
	// Output:
	// bank.pix: 2/minute sliding-window
	// bank.pix_acct-42: 3/minute sliding-window
	// acct-1: 2 of 5 allowed
	// acct-42: 3 of 5 allowed
}
