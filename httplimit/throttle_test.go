package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// throttled returns an env on a real-clock store and a route that allows
// one request per window and waits up to maxDelay.
func throttled(t *testing.T, window, maxDelay time.Duration, waiters int) (*env, http.Handler) {
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	e := newEnv(t, envOptions{store: ms})
	return e, e.handler(t, httplimit.Route{Name: "slow", MaxDelay: maxDelay, MaxWaiters: waiters,
		Limits: []httplimit.Limit{{Rule: rule(t, "slow", 1, window), Key: httplimit.ClientIP(nil)}}})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestThrottleWaitsAndSucceeds(t *testing.T) {
	const window, maxDelay = 150 * time.Millisecond, 500 * time.Millisecond
	e, h := throttled(t, window, maxDelay, 0)
	if rec := do(h, "192.0.2.1:1"); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	start := time.Now()
	rec := do(h, "192.0.2.1:1")
	took := time.Since(start)
	if rec.Code != 200 {
		t.Fatalf("throttled request: %d, want 200 after waiting", rec.Code)
	}
	if took < window-20*time.Millisecond || took > maxDelay+slack {
		t.Fatalf("throttled request took %v, want about the window (%v), at most MaxDelay (%v)", took, window, maxDelay)
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": "allowed"}); got != 1 {
		t.Errorf("throttled{result=allowed} = %v, want 1", got)
	}
	t.Logf("waited %v for a window of %v", took, window)
}

func TestThrottleRejectsWhatItCannotWaitFor(t *testing.T) {
	e, h := throttled(t, time.Minute, 2*time.Second, 0) // a MaxDelay beyond slack: waiting it would show
	do(h, "192.0.2.1:1")
	start := time.Now()
	if rec := do(h, "192.0.2.1:1"); rec.Code != 429 || time.Since(start) > slack {
		t.Fatalf("a denial beyond MaxDelay: %d after %v, want an immediate 429", rec.Code, time.Since(start))
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", nil); got != 0 {
		t.Errorf("throttled = %v, want 0: nothing waited", got)
	}
}

func TestThrottleBoundsTheWaiters(t *testing.T) {
	e, h := throttled(t, time.Second, 5*time.Second, 1)
	do(h, "192.0.2.1:1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1"
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, req)
		done <- rec.code
	}()
	waitFor(t, "a waiting request", func() bool { return metric(t, e.reg, "floodgate_throttle_waiting", nil) == 1 })

	start := time.Now()
	rec := do(h, "192.0.2.1:1")
	if rec.Code != 429 || time.Since(start) > slack {
		t.Fatalf("over the waiter bound: %d after %v, want an immediate 429", rec.Code, time.Since(start))
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": "rejected"}); got != 1 {
		t.Errorf("throttled{result=rejected} = %v, want 1", got)
	}

	start = time.Now()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("the cancelled request was answered %d", code)
	}
	if d := time.Since(start); d > slack {
		t.Errorf("the wait ended %v after the client left, want at once", d)
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": "canceled"}); got != 1 {
		t.Errorf("throttled{result=canceled} = %v, want 1", got)
	}
	if got := metric(t, e.reg, "floodgate_throttle_waiting", nil); got != 0 {
		t.Errorf("waiting = %v after the wait ended", got)
	}
}

// Over a real connection: the client hangs up mid-wait and the server's
// wait ends with it.
func TestThrottleEndsWhenTheClientHangsUp(t *testing.T) {
	e, h := throttled(t, 10*time.Second, 10*time.Second, 0)
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, err := http.Get(srv.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiting := func() bool { return metric(t, e.reg, "floodgate_throttle_waiting", nil) == 1 }
	go func() { // no t.Fatal off the test goroutine: the Do below fails if this never cancels
		for deadline := time.Now().Add(5 * time.Second); !waiting() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the client's cancellation", resp.StatusCode)
	}
	start := time.Now()
	waitFor(t, "the wait to end", func() bool { return metric(t, e.reg, "floodgate_throttle_waiting", nil) == 0 })
	if d := time.Since(start); d > time.Second {
		t.Errorf("the server kept waiting %v after the client hung up", d)
	}
	if got := metric(t, e.reg, "floodgate_throttled_total", map[string]string{"result": "canceled"}); got != 1 {
		t.Errorf("throttled{result=canceled} = %v, want 1", got)
	}
	http.DefaultClient.CloseIdleConnections()
}
