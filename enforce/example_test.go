package enforce_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/memstore"
)

// A job queue, not an HTTP server, limits each tenant to 2 jobs a minute,
// with the failure mode, metrics and logs that httplimit routes get.
func Example() {
	store := memstore.New(memstore.Options{})
	limiter, _ := floodgate.New(store, floodgate.Options{})
	e, _ := enforce.New(enforce.Options{Limiter: limiter}) // Registerer, Logger: as the service has them
	defer e.Close()
	perTenant := floodgate.Rule{Name: "jobs", Limit: 2, Window: time.Minute}
	jobs, _ := e.Gate(enforce.Spec{Name: "jobs", Limits: []enforce.Limit{{Rule: perTenant}}, Failure: enforce.FailClosed})

	ctx := context.Background()
	for range 3 {
		res, _ := jobs.Check(ctx, jobs.Hits(ctx, []string{"tenant-7"}))
		fmt.Println(res.Outcome, res.Decision.Remaining, res.Decision.RetryAfter.Round(time.Minute))
	}
	store.Close() // the store fails: the gate fails closed
	res, _ := jobs.Check(ctx, jobs.Hits(ctx, []string{"tenant-7"}))
	fmt.Println(res.Outcome, res.Allowed(), res.FailRetryAfter())
	// Output:
	// allowed 1 0s
	// allowed 0 0s
	// denied 0 1m0s
	// failed_closed false 5s
}
