package bank

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
)

// Failed logins and 429s are logged with the client IP, never the
// document, and in aggregate: a line at the first event, then one per
// interval counting the others by IP, so an attack cannot flood the log.
func TestFailedLoginsAndDenialsAreLoggedByIP(t *testing.T) {
	logs := &syncbuf.Buffer{}
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	users, _ := NewDirectory([]UserRecord{{Document: testDoc, PasswordBcrypt: string(hash)}})
	cfg, _ := ConfigFromEnv(env(nil))
	cfg.TokenSecret = testSecret
	store := memstore.New(memstore.Options{})
	defer store.Close()
	l, _ := floodgate.New(store, floodgate.Options{})
	s, err := NewServer(Deps{Config: cfg, Limiter: l, Users: users, Ledger: NewLedger(),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// 3 failures from one IPv4 client, 2 from an IPv6 one: the account is
	// then locked (5 per account), and 4 more attempts are 429s.
	for _, ip := range []string{"198.51.100.1", "198.51.100.1", "198.51.100.1", "[2001:db8::1]", "[2001:db8::1]"} {
		if rec := loginFrom(s, ip, testDoc, "wrong"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong password: %d", rec.Code)
		}
	}
	for range 4 {
		if rec := loginFrom(s, "203.0.113.5", testDoc, "wrong"); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("locked account: %d", rec.Code)
		}
	}
	s.Close() // writes the held counts
	out := logs.String()
	for _, secret := range []string{"52998224725", testDoc, "wrong"} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, out)
		}
	}
	lines := func(msg string) (n int, all string) {
		for line := range strings.Lines(out) {
			if strings.Contains(line, `msg="`+msg+`"`) {
				n++
				all += line
			}
		}
		return n, all
	}
	n, failed := lines("login failed")
	if n != 2 || !strings.Contains(failed, "by_ip.198.51.100.1=1") || !strings.Contains(failed, "by_ip.198.51.100.1=2") ||
		!strings.Contains(failed, "by_ip.2001:db8::1=2") {
		t.Fatalf("want 2 lines for 5 failed logins (the first, then the other 4 by IP), got %d:\n%s", n, out)
	}
	n, denied := lines("rate limited")
	if n != 2 || !strings.Contains(denied, "route=login") || !strings.Contains(denied, "by_ip.203.0.113.5=3") {
		t.Fatalf("want 2 lines for 4 429s (the first, then the other 3 by IP), got %d:\n%s", n, out)
	}
	t.Logf("log:\n%s", out)
}
