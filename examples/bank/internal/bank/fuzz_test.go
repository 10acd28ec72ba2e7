package bank

import (
	"net/http"
	"testing"
)

// FuzzBodies sends arbitrary bodies to login and PIX: the service never
// panics and answers only with the statuses its contract names.
func FuzzBodies(f *testing.F) {
	for _, s := range []string{
		`{"document":"529.982.247-25","password":"right"}`,
		`{"key":"k","amount_cents":100}`,
		`{"document":null}`, `[]`, `{`, `{"amount_cents":-1e400}`, "\xff\x00", `{"key":"` + "\u0000" + `"}`,
	} {
		f.Add(s)
	}
	s := newTestServer(f, nil)
	token := loginToken(f, s)
	f.Fuzz(func(t *testing.T, body string) {
		switch rec := call(s, "POST", "/login", body); rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnauthorized, http.StatusTooManyRequests:
		default:
			t.Fatalf("login %q: status %d", body, rec.Code)
		}
		switch rec := call(s, "POST", "/pix", body, "Authorization", "Bearer "+token); rec.Code {
		case http.StatusCreated, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		default:
			t.Fatalf("pix %q: status %d", body, rec.Code)
		}
	})
}
