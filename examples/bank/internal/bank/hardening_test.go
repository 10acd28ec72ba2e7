package bank

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestForgedCredentials sends every kind of bad bearer token to the
// authenticated routes: each is a 401 with one and the same body, so the
// answer tells a forger nothing about what was wrong.
func TestForgedCredentials(t *testing.T) {
	s := newTestServer(t, nil)
	good := loginToken(t, s)
	doc, _ := ParseDocument(testDoc)
	account := s.keys.AccountID(doc)
	if !strings.HasPrefix(good, account+".") {
		t.Fatalf("token %q is not for account %s", good, account)
	}
	other := NewKeys([]byte(strings.Repeat("o", 32)))
	now := time.Now()
	for _, tc := range []struct {
		name, header string
	}{
		{"expired token", "Bearer " + s.keys.Token(account, now.Add(-time.Second))},
		{"token of another secret", "Bearer " + other.Token(account, now.Add(time.Hour))},
		{"another account, same signature", "Bearer " + strings.Replace(good, account, other.AccountID(doc), 1)},
		{"extended expiry, same signature", "Bearer " + extendExpiry(good)},
		{"truncated signature", "Bearer " + good[:len(good)-1]},
		{"signature only", "Bearer " + good[strings.LastIndexByte(good, '.')+1:]},
		{"device cookie as token", "Bearer " + s.keys.DeviceCookie(account, "d", nil, now.Add(time.Hour))},
		{"extra field", "Bearer " + s.keys.Token(account+".x", now.Add(time.Hour))},
		{"over 512 bytes", "Bearer " + s.keys.Token(strings.Repeat("a", 600), now.Add(time.Hour))},
		{"NUL byte", "Bearer " + good + "\x00"},
		{"empty token", "Bearer "},
		{"lower-case scheme", "bearer " + good},
		{"Basic scheme", "Basic " + good},
		{"no scheme", good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rt := range []struct{ method, path, body string }{
				{"POST", "/pix", `{"key":"k","amount_cents":100}`},
				{"GET", "/statement", ""},
			} {
				req := httptest.NewRequest(rt.method, rt.path, strings.NewReader(rt.body))
				req.Header.Set("Authorization", tc.header)
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, req)
				body := strings.TrimSpace(rec.Body.String())
				if rec.Code != http.StatusUnauthorized || (body != `{"error":"invalid or expired token"}` && body != `{"error":"missing bearer token"}`) {
					t.Fatalf("%s %s with %s: %d %s, want 401 and no detail", rt.method, rt.path, tc.name, rec.Code, body)
				}
			}
		})
	}
	if rec := call(s, "GET", "/statement", "", "Authorization", "Bearer "+good); rec.Code != http.StatusOK {
		t.Fatalf("the good token stopped working: %d", rec.Code)
	}
}

// extendExpiry moves a signed value's expiry a year on, keeping its
// signature.
func extendExpiry(signed string) string {
	f := strings.Split(signed, ".")
	f[len(f)-2] = fmt.Sprint(time.Now().Add(365 * 24 * time.Hour).Unix())
	return strings.Join(f, ".")
}

// loginFrom posts a login for doc with password from the client address
// ip and returns the answer.
func loginFrom(s *Server, ip, doc, password string) *httptest.ResponseRecorder {
	return serve(s, loginRequest(ip, doc, password))
}

// loginRequest is the login request of loginFrom.
func loginRequest(ip, doc, password string) *http.Request {
	req := httptest.NewRequest("POST", "/login", strings.NewReader(`{"document":"`+doc+`","password":"`+password+`"}`))
	req.RemoteAddr = ip + ":1234"
	req.Header.Set("Content-Type", "application/json")
	return req
}

// serve returns s's answer to req.
func serve(s *Server, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

// shape is everything a client sees of an answer but the Date field.
func shape(rec *httptest.ResponseRecorder) string {
	h := rec.Header().Clone()
	h.Del("Date")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", rec.Code)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %q\n", k, h[k])
	}
	b.WriteString(rec.Body.String())
	return b.String()
}

// TestLoginShapeIsConstant compares, field by field and byte by byte, the
// answers about a known account and an unknown one: a wrong password, and
// the 429 once each is locked. Neither says whether the account exists.
func TestLoginShapeIsConstant(t *testing.T) {
	s := newTestServer(t, nil)
	const unknown = "111.444.777-35"
	for _, tc := range []struct {
		name     string
		attempts int // wrong passwords before the compared one, each from its own IP
	}{
		{"wrong password", 0},
		{"locked account", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := map[string]string{}
			for _, doc := range []string{testDoc, unknown} {
				for i := range tc.attempts {
					loginFrom(s, fmt.Sprintf("198.51.100.%d", i+1), doc, "wrong")
				}
				answers[doc] = shape(loginFrom(s, "203.0.113.7", doc, "wrong"))
			}
			if answers[testDoc] != answers[unknown] {
				t.Fatalf("known account:\n%s\nunknown account:\n%s", answers[testDoc], answers[unknown])
			}
			t.Logf("both answered:\n%s", answers[testDoc])
		})
	}
}

// costServer is a server whose directory holds accounts hashed at bcrypt's
// default cost, as in production, so that a login costs what it does
// there.
func costServer(tb testing.TB) (*Server, []Document) {
	tb.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.DefaultCost)
	if err != nil {
		tb.Fatal(err)
	}
	docs := DemoDocuments(64)
	var recs []UserRecord
	for _, d := range docs[:32] {
		recs = append(recs, UserRecord{Document: string(d), PasswordBcrypt: string(hash)})
	}
	users, err := NewDirectory(recs)
	if err != nil {
		tb.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	tb.Cleanup(func() { store.Close() })
	// Limits far above what the measurement sends: it times the handler,
	// not the limiter.
	l, _ := floodgate.New(store, floodgate.Options{})
	cfg, _ := ConfigFromEnv(func(k string) string {
		return map[string]string{"LIMIT_LOGIN_IP": "1000000/1m", "LIMIT_LOGIN_ACCOUNT": "1000000/1m"}[k]
	})
	cfg.TokenSecret = strings.Repeat("k", 32)
	s, err := NewServer(Deps{Config: cfg, Limiter: l, Users: users, Ledger: NewLedger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, docs
}

// TestUnknownAccountsPayTheHashCost times wrong-password logins on known
// accounts and logins on unknown ones, interleaved, and logs the medians:
// an unknown account must cost a bcrypt comparison too, or timing would
// enumerate accounts. The figure is logged, not asserted (timing on a
// shared machine is noise); the benchmark BenchmarkLogin gives it too.
func TestUnknownAccountsPayTheHashCost(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes at bcrypt's default cost")
	}
	s, docs := costServer(t)
	const n = 3 // bcrypt under the race detector takes most of a second
	var known, unknown []time.Duration
	for i := range n {
		for _, u := range []bool{false, true} {
			doc := docs[i]
			if u {
				doc = docs[32+i]
			}
			start := time.Now()
			rec := loginFrom(s, "203.0.113.7", string(doc), "wrong")
			took := time.Since(start)
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("login: %d %s", rec.Code, rec.Body)
			}
			if u {
				unknown = append(unknown, took)
			} else {
				known = append(known, took)
			}
		}
	}
	mk, mu := median(known), median(unknown)
	t.Logf("figure: median login, wrong password: known account %v, unknown account %v (ratio %.2f; %d each, bcrypt cost %d)",
		mk.Round(time.Microsecond), mu.Round(time.Microsecond), float64(mu)/float64(mk), n, bcrypt.DefaultCost)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkLogin measures a wrong-password login on a known account and a
// login on an unknown one: the two should cost the same (one bcrypt
// comparison at the directory's cost).
func BenchmarkLogin(b *testing.B) {
	s, docs := costServer(b)
	for _, bc := range []struct {
		name string
		doc  Document
	}{
		{"known", docs[0]},
		{"unknown", docs[40]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if rec := loginFrom(s, "203.0.113.7", string(bc.doc), "wrong"); rec.Code != http.StatusUnauthorized {
					b.Fatalf("login: %d", rec.Code)
				}
			}
		})
	}
}
