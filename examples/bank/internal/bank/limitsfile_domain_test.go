package bank

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// A LIMITS_FILE whose domain is not "bank" would apply to nothing, and
// silently: bankapi refuses it at start, and warns when a reload drops
// the domain.
func TestLimitsFileOfAnotherDomain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(domain string) {
		t.Helper()
		body := "domain: " + domain + "\ndescriptors:\n  - key: pix\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("bankapi")
	cfg, err := ConfigFromEnv(env(map[string]string{"TOKEN_SECRET": testSecret, "LIMITS_FILE": file}))
	if err != nil {
		t.Fatal(err)
	}
	if app, err := NewApp(context.Background(), cfg, slog.New(slog.DiscardHandler), AppOptions{}); err == nil {
		app.Close()
		t.Fatal("NewApp accepted a LIMITS_FILE of domain bankapi")
	} else if !strings.Contains(err.Error(), `domain "bank"`) {
		t.Fatalf("NewApp: %v; want an error naming the domain bank", err)
	}
	write("bank")
	logs := &syncbuf.Buffer{}
	app, err := NewApp(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)), AppOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	write("bankapi")
	waitForLog(t, logs, "LIMITS_FILE has no domain bank", 1)
}
