// Package burst releases many goroutines at once, for the concurrency
// proofs of the tests: a burst of requests that all arrive together.
package burst

import (
	"sync"
	"testing"
)

// Run runs f(0), ..., f(n-1) in n goroutines released at the same moment,
// waits for all of them, and fails t with every error they returned.
func Run(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			if err := f(i); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}
