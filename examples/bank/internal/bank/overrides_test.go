package bank

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/overrides"
)

// With Redis, an account's PIX limit set from a shell (floodgate override
// set, here through an overrides.Table) holds in a replica started after it at
// once, and in a running replica within the 5 s refresh, without a
// restart; /metrics counts the overrides.
func TestOverridesReachEveryReplica(t *testing.T) {
	url := "redis://" + redistest.Addr(t)
	// A fresh secret gives fresh account keys: the shared Redis, and its
	// overrides table, are never flushed.
	// A decision budget that a loaded test machine keeps: a decision
	// that fails is answered without the rate-limit fields.
	cfg, err := ConfigFromEnv(env(map[string]string{"REDIS_URL": url, "TOKEN_SECRET": randomID() + randomID(), "DECISION_TIMEOUT": "2s"}))
	if err != nil {
		t.Fatal(err)
	}
	ledger := NewLedger()
	replica := func() *App {
		t.Helper()
		app, err := NewApp(context.Background(), cfg, slog.New(slog.DiscardHandler), AppOptions{Ledger: ledger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { app.Close() })
		return app
	}
	first := replica()
	rec := serve(first.Server, loginRequest("203.0.113.10", string(DemoDocuments(1)[0]), DemoPassword))
	var out struct{ Token string }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	account, err := first.keys.VerifyToken(out.Token, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pix := func(app *App) (int, string) {
		rec := call(app.Server, "POST", "/pix", `{"key":"k","amount_cents":1}`, "Authorization", "Bearer "+out.Token)
		return rec.Code, rec.Header().Get("RateLimit-Policy")
	}
	if code, policy := pix(first); code != http.StatusCreated || !strings.Contains(policy, `"pix";q=10;w=60`) {
		t.Fatalf("first PIX: %d, policy %q; want 201 under the default 10/min", code, policy)
	}

	table, err := overrides.New(context.Background(), overrides.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	set := time.Now()
	if err := table.Set(context.Background(), overrides.Entry{Rule: floodgate.Rule{Name: "pix", Limit: 3, Window: time.Minute}, Key: account}); err != nil {
		t.Fatal(err)
	}
	defer table.Delete(context.Background(), "pix", account)

	// A replica started now loads it: the count so far (1) is kept, so
	// 2 more are admitted.
	second := replica()
	admitted := 0
	for range 4 {
		code, policy := pix(second)
		if !strings.Contains(policy, `"pix";q=3;w=60`) {
			t.Fatalf("second replica: %d, policy %q; want the override's 3/min", code, policy)
		}
		if code == http.StatusCreated {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("second replica admitted %d; want 2 (3 less the 1 taken)", admitted)
	}
	// The running replica follows within its refresh (5 s).
	for {
		code, policy := pix(first)
		if strings.Contains(policy, `"pix";q=3;w=60`) {
			if code != http.StatusTooManyRequests {
				t.Errorf("first replica under the override: %d; want 429", code)
			}
			t.Logf("figure: the running replica applied the override %v after it was set", time.Since(set).Round(time.Millisecond))
			break
		}
		if time.Since(set) > 7*time.Second {
			t.Fatalf("the running replica still answers %q %v after the override was set; want it within the 5s refresh", policy, time.Since(set))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec = httptest.NewRecorder()
	second.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `floodgate_overrides{table="fg:{overrides}"} `) {
		t.Errorf("/metrics lacks floodgate_overrides")
	}
}
