package rlconfig_test

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// An envoyproxy/ratelimit file with one floodgate extension (an exact
// sliding window for the whole domain), matched and enforced with a
// floodgate Limiter.
func Example() {
	cfg, err := rlconfig.Parse(map[string][]byte{"messaging.yaml": []byte(`
domain: messaging
algorithm: sliding_window
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2
`)}, rlconfig.Options{})
	if err != nil {
		fmt.Println(err) // every problem, each with its file and path
		return
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		panic(err)
	}

	m := cfg.Match("messaging", []rlconfig.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}})
	fmt.Println(m.Outcome, m.Limits[0])
	for i := 1; i <= 3; i++ {
		d, err := limiter.Check(context.Background(), m.Hits(1)...)
		if err != nil {
			panic(err) // the store failed: apply m.FailureMode
		}
		fmt.Printf("message %d: allowed=%v remaining=%d\n", i, d.Allowed, d.Remaining)
	}
	fmt.Println(cfg.Match("billing", nil).Outcome)
	// Output:
	// limited messaging.message_type_marketing.to_number: 2/day sliding-window
	// message 1: allowed=true remaining=1
	// message 2: allowed=true remaining=0
	// message 3: allowed=false remaining=0
	// unknown-domain
}
