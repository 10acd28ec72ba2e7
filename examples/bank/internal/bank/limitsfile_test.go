package bank

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// With LIMITS_FILE, the limits follow the file while the service runs:
// a per-account value, a reload, a refused file that keeps the limits in
// force, each reload counted.
func TestLimitsFileChangesLimitsWithoutARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(pix, vip string) {
		t.Helper()
		body := "domain: bank\ndescriptors:\n  - key: pix\n    rate_limit: {unit: minute, requests_per_unit: " + pix + "}\n"
		if vip != "" {
			body += "  - key: pix\n    value: " + vip + "\n    rate_limit: {unit: minute, requests_per_unit: 4}\n"
		}
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("2", "")
	cfg, err := ConfigFromEnv(env(map[string]string{"TOKEN_SECRET": testSecret, "LIMITS_FILE": file}))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	app, err := NewApp(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)), AppOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	docs := DemoDocuments(2)
	token := func(doc Document) string {
		rec := serve(app.Server, loginRequest("203.0.113.9", string(doc), DemoPassword))
		var out struct{ Token, Account string }
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			t.Fatalf("login: %d %s", rec.Code, rec.Body)
		}
		return out.Token
	}
	alice, bob := token(docs[0]), token(docs[1])
	pixes := func(tok string, n int) (ok int, policy string) {
		for range n {
			rec := call(app.Server, "POST", "/pix", `{"key":"k","amount_cents":1}`, "Authorization", "Bearer "+tok)
			if rec.Code == http.StatusCreated {
				ok++
			}
			policy = rec.Header().Get("RateLimit-Policy")
		}
		return ok, policy
	}
	if ok, policy := pixes(alice, 4); ok != 2 || !strings.Contains(policy, `"pix";q=2;w=60`) {
		t.Errorf("under the file's 2/min: %d PIX admitted, policy %q", ok, policy)
	}
	// Bob's account gets 4 a minute of its own.
	account, err := app.keys.VerifyToken(bob, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write("2", account)
	waitForLog(t, logs, "LIMITS_FILE reloaded", 1)
	if ok, policy := pixes(bob, 6); ok != 4 || !strings.Contains(policy, `"pix";q=4;w=60`) {
		t.Errorf("bob under his own 4/min: %d admitted, policy %q", ok, policy)
	}
	if err := os.WriteFile(file, []byte("domain: bank\ndescriptors:\n  - key: pix\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, logs, "LIMITS_FILE refused", 1)
	if ok, _ := pixes(alice, 1); ok != 0 {
		t.Errorf("after a refused file alice got %d more PIX; the 2/min in force must hold", ok)
	}
	rec := httptest.NewRecorder()
	app.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"floodgate_config_load_success_total 1", "floodgate_config_load_error_total 1"} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// waitForLog waits until logs hold n lines containing msg.
func waitForLog(t *testing.T, logs *syncbuf.Buffer, msg string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), msg) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs within 10s:\n%s", msg, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
