package bank

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/breakerstore"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestLoginBurstKeepsTheBreakerClosed replays the review's finding: 20
// concurrent wrong-password logins, from fresh IPs on fresh accounts of
// bcrypt's default cost, against Redis behind the circuit breaker with the
// default 50 ms decision budget. Before the fix, bcrypt saturated the CPUs,
// the store calls missed their budget, the breaker counted the misses as
// store failures and opened: 13 × 401 and 7 × 429. Now the password checks
// are bounded (LOGIN_CONCURRENCY) and the breaker counts only failures the
// store caused: every login is answered 401 and the breaker stays closed.
func TestLoginBurstKeepsTheBreakerClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 20 passwords at bcrypt's default cost")
	}
	addr := redistest.Addr(t)
	// A fresh secret gives fresh account keys, and a random /16 of the
	// benchmarking range fresh IPs: the shared Redis is never flushed.
	cfg, err := ConfigFromEnv(env(map[string]string{
		"REDIS_URL":    "redis://" + addr,
		"TOKEN_SECRET": randomID() + randomID(),
	}))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	app, err := NewApp(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)), AppOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	const n = 20
	net := fmt.Sprintf("198.%d.%d", 18+rand.IntN(2), rand.IntN(256))
	docs := DemoDocuments(n)
	codes := make([]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			// Staggered by 5 ms, as clients over a network arrive: the
			// later logins are decided while the earlier ones hash.
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			codes[i] = loginFrom(app.Server, fmt.Sprintf("%s.%d", net, i+1), string(docs[i]), "wrong").Code
		})
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusUnauthorized] != n {
		t.Errorf("%d concurrent wrong-password logins answered %v, want %d × 401", n, count, n)
	}
	if st := app.breaker.State(); st != breakerstore.Closed {
		t.Errorf("breaker %v after the burst, want closed", st)
	}
	if strings.Contains(logs.String(), "store circuit breaker") {
		t.Errorf("the breaker changed state during the burst:\n%s", logs)
	}
	t.Logf("figure: %d concurrent wrong-password logins (bcrypt cost 10, LOGIN_CONCURRENCY %d): %v", n, cfg.LoginConcurrency, count)
}
