package bank

import (
	"net/http"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// The device cookie is Secure unless INSECURE_COOKIES=true, even on a
// request that came without TLS: behind a TLS-terminating proxy every
// request does.
func TestDeviceCookieIsSecureByDefault(t *testing.T) {
	for _, tc := range []struct {
		name     string
		insecure bool
	}{{"default", false}, {"INSECURE_COOKIES=true", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServerWith(t, nil, func(c *Config) { c.InsecureCookies = tc.insecure })
			rec := loginFrom(s, "203.0.113.7", testDoc, "right")
			c := deviceCookie(rec)
			if c == nil {
				t.Fatalf("no device cookie after a successful login: %d", rec.Code)
			}
			if c.Secure == tc.insecure {
				t.Fatalf("device cookie Secure=%v over a request without TLS, want %v", c.Secure, !tc.insecure)
			}
		})
	}
}

func deviceCookie(rec interface{ Result() *http.Response }) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == DeviceCookie {
			return c
		}
	}
	return nil
}

// serverOf returns a test server whose directory is recs.
func serverOf(t *testing.T, recs []UserRecord) *Server {
	t.Helper()
	users, err := NewDirectory(recs)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TokenSecret = testSecret
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	l, _ := floodgate.New(store, floodgate.Options{})
	s, err := NewServer(Deps{Config: cfg, Limiter: l, Users: users, Ledger: NewLedger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A device cookie is bound to the account's password: once the password
// changes (a new hash in the users file), every cookie issued before is
// void, and the known device is limited on the account's key like any
// other. The in-memory rehash of a login does not void it: a replica that
// loaded the same file still honours it.
func TestPasswordChangeVoidsDeviceCookies(t *testing.T) {
	oldHash, _ := bcrypt.GenerateFromPassword([]byte("old"), bcrypt.MinCost)
	newHash, _ := bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
	dear, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost+1) // so that a login rehashes
	other := DemoDocuments(1)[0]
	before := []UserRecord{{Document: testDoc, PasswordBcrypt: string(oldHash)}, {Document: string(other), PasswordBcrypt: string(dear)}}
	after := []UserRecord{{Document: testDoc, PasswordBcrypt: string(newHash)}, {Document: string(other), PasswordBcrypt: string(dear)}}

	cookie := deviceCookie(loginFrom(serverOf(t, before), "203.0.113.7", testDoc, "old"))
	if cookie == nil {
		t.Fatal("no device cookie after a successful login")
	}
	for _, tc := range []struct {
		name  string
		users []UserRecord
		pass  string
		want  int
	}{
		{"a replica with the same users file", before, "old", http.StatusOK},
		{"after a password change", after, "new", http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serverOf(t, tc.users)
			for i := range 5 { // lock the account's key
				loginFrom(s, "198.51.100."+string(rune('1'+i)), testDoc, "wrong")
			}
			req := loginRequest("192.0.2.1", testDoc, tc.pass)
			req.AddCookie(cookie)
			if rec := serve(s, req); rec.Code != tc.want {
				t.Fatalf("login on the locked account with the device cookie: %d, want %d", rec.Code, tc.want)
			}
		})
	}
}
