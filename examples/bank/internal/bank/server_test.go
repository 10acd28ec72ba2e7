package bank

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

const testDoc = "529.982.247-25"

// testSecret is the TOKEN_SECRET of the test servers.
const testSecret = "k3y-0f-th3-t3st-s3rv3rs-pl3as3-r0tat3"

func newTestServer(t testing.TB, ready func(context.Context) error) *Server {
	t.Helper()
	return newTestServerWith(t, ready, nil)
}

// newTestServerWith is newTestServer with the configuration changed by
// change, if not nil.
func newTestServerWith(t testing.TB, ready func(context.Context) error, change func(*Config)) *Server {
	t.Helper()
	cfg, err := ConfigFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TokenSecret = testSecret
	if change != nil {
		change(&cfg)
	}
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	users, err := NewDirectory([]UserRecord{{Document: testDoc, Name: "Ana", PasswordBcrypt: string(hash)}})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	l, _ := floodgate.New(store, floodgate.Options{})
	s, err := NewServer(Deps{Config: cfg, Limiter: l, Users: users, Ledger: NewLedger(), Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(s *Server, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

func loginToken(t testing.TB, s *Server) string {
	t.Helper()
	rec := call(s, "POST", "/login", `{"document":"`+testDoc+`","password":"right"}`)
	var out struct{ Token string }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Token == "" {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	return out.Token
}

func TestRoutes(t *testing.T) {
	s := newTestServer(t, nil)
	token := loginToken(t, s)
	auth := []string{"Authorization", "Bearer " + token}
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		want                     int
	}{
		{"login malformed JSON", "POST", "/login", `{"document":`, nil, 400},
		{"login unknown field", "POST", "/login", `{"document":"` + testDoc + `","password":"x","admin":true}`, nil, 400},
		{"login invalid CPF", "POST", "/login", `{"document":"123.456.789-00","password":"x"}`, nil, 400},
		{"login empty password", "POST", "/login", `{"document":"` + testDoc + `","password":""}`, nil, 400},
		{"login body over 4 KiB", "POST", "/login", `{"document":"` + testDoc + `","password":"` + strings.Repeat("x", 5000) + `"}`, nil, 413},
		{"login body over 4 KiB of spaces", "POST", "/login", strings.Repeat(" ", 5000) + `{"document":"` + testDoc + `","password":"right"}`, nil, 413},
		{"login wrong password", "POST", "/login", `{"document":"` + testDoc + `","password":"wrong"}`, nil, 401},
		{"login unknown account", "POST", "/login", `{"document":"111.444.777-35","password":"right"}`, nil, 401},
		{"pix without token", "POST", "/pix", `{"key":"k","amount_cents":1}`, nil, 401},
		{"pix forged token", "POST", "/pix", `{"key":"k","amount_cents":1}`, []string{"Authorization", "Bearer " + token + "x"}, 401},
		{"pix zero amount", "POST", "/pix", `{"key":"k","amount_cents":0}`, auth, 400},
		{"pix fractional amount", "POST", "/pix", `{"key":"k","amount_cents":1.5}`, auth, 400},
		{"pix empty key", "POST", "/pix", `{"key":"","amount_cents":100}`, auth, 400},
		{"pix trailing data", "POST", "/pix", `{"key":"k","amount_cents":100} {}`, auth, 400},
		// Valid bodies but for their size: only the 4 KiB limit refuses them.
		{"pix body over 4 KiB of spaces", "POST", "/pix", strings.Repeat(" ", 5000) + `{"key":"k","amount_cents":100}`, auth, 413},
		{"pix malformed body under 4 KiB", "POST", "/pix", strings.Repeat(" ", 4000) + `{"key":`, auth, 400},
		{"pix body of 4 KiB", "POST", "/pix", strings.Repeat(" ", 4096-30) + `{"key":"k","amount_cents":100}`, auth, 201},
		{"pix ok", "POST", "/pix", `{"key":"k","amount_cents":100}`, auth, 201},
		{"statement ok", "GET", "/statement", "", auth, 200},
		{"statement without token", "GET", "/statement", "", nil, 401},
		{"healthz", "GET", "/healthz", "", nil, 200},
		{"readyz", "GET", "/readyz", "", nil, 200},
		{"metrics are not public", "GET", "/metrics", "", nil, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := call(s, tc.method, tc.path, tc.body, tc.header...); rec.Code != tc.want {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
			}
		})
	}
	rec := call(s, "GET", "/statement", "", auth...)
	if !strings.Contains(rec.Body.String(), `"amount_cents":100`) {
		t.Fatalf("statement does not list the transfer: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "floodgate_") {
		t.Fatalf("the metrics handler answered %d, without floodgate's series:\n%s", rec.Code, rec.Body)
	}
}

func TestReadyzReportsTheStore(t *testing.T) {
	s := newTestServer(t, func(context.Context) error { return errors.New("down") })
	if rec := call(s, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with a dead store: %d", rec.Code)
	}
}

// Unknown and known accounts answer the same shape on a wrong password, so
// login does not reveal which documents are customers.
func TestLoginDoesNotEnumerate(t *testing.T) {
	s := newTestServer(t, nil)
	known := call(s, "POST", "/login", `{"document":"`+testDoc+`","password":"wrong"}`)
	unknown := call(s, "POST", "/login", `{"document":"111.444.777-35","password":"wrong"}`)
	if known.Code != unknown.Code || known.Body.String() != unknown.Body.String() {
		t.Fatalf("known %d %s vs unknown %d %s", known.Code, known.Body, unknown.Code, unknown.Body)
	}
}

// A device cookie of another account, a forged one or an expired one is
// ignored: the attempt is limited on the account's key.
func TestDeviceCookies(t *testing.T) {
	s := newTestServer(t, nil)
	rec := call(s, "POST", "/login", `{"document":"`+testDoc+`","password":"right"}`)
	var cookie string
	for _, c := range rec.Result().Cookies() {
		if c.Name == DeviceCookie {
			cookie = c.Value
		}
	}
	if cookie == "" {
		t.Fatal("no device cookie after a successful login")
	}
	// Lock the account with wrong passwords from a new device.
	for range 5 {
		call(s, "POST", "/login", `{"document":"`+testDoc+`","password":"wrong"}`)
	}
	body := `{"document":"` + testDoc + `","password":"right"}`
	if rec := call(s, "POST", "/login", body); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("new device on a locked account: %d, want 429", rec.Code)
	}
	account := s.keys.AccountID("52998224725")
	for _, tc := range []struct {
		name, cookie string
		want         int
	}{
		{"known device", cookie, 200},
		{"forged", cookie + "x", 429},
		{"another account's", s.keys.DeviceCookie(s.keys.AccountID("11144477735"), "d", nil, time.Now().Add(time.Hour)), 429},
		{"expired", s.keys.DeviceCookie(account, "d", s.deps.Users.Credential("52998224725"), time.Now().Add(-time.Second)), 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := call(s, "POST", "/login", body, "Cookie", DeviceCookie+"="+tc.cookie); rec.Code != tc.want {
				t.Fatalf("login with %s device cookie: %d, want %d", tc.name, rec.Code, tc.want)
			}
		})
	}
}
