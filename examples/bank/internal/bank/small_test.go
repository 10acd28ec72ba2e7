package bank

import (
	"net/http"
	"strings"
	"testing"
)

// Login takes JSON only: a cross-site form post (which needs no CORS
// preflight) cannot send login attempts.
func TestLoginRequiresJSON(t *testing.T) {
	s := newTestServer(t, nil)
	for _, tc := range []struct {
		contentType string
		want        int
	}{
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"", http.StatusUnsupportedMediaType},
		{"application/json; charset=utf-8", http.StatusOK},
		{"Application/JSON", http.StatusOK},
	} {
		req := loginRequest("203.0.113.7", testDoc, "right")
		req.Header.Set("Content-Type", tc.contentType)
		if tc.contentType == "" {
			req.Header.Del("Content-Type")
		}
		if rec := serve(s, req); rec.Code != tc.want {
			t.Errorf("login with Content-Type %q: %d %s, want %d", tc.contentType, rec.Code, rec.Body, tc.want)
		}
	}
}

// The token response may not be stored by any cache.
func TestTokenResponseIsNotCached(t *testing.T) {
	s := newTestServer(t, nil)
	rec := loginFrom(s, "203.0.113.7", testDoc, "right")
	if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("token response: %d with Cache-Control %q, want 200 with no-store", rec.Code, rec.Header().Get("Cache-Control"))
	}
}

// A token has one spelling: the other three spellings of its MAC's last
// base64 character (which differ only in unused bits) are refused.
func TestTokenHasOneSpelling(t *testing.T) {
	s := newTestServer(t, nil)
	good := loginToken(t, s)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	for bits := 1; bits < 4; bits++ {
		other := good[:len(good)-1] + string(alphabet[last^bits])
		if rec := call(s, "GET", "/statement", "", "Authorization", "Bearer "+other); rec.Code != http.StatusUnauthorized {
			t.Errorf("token spelled %q (unused bits %d): %d, want 401", other[len(other)-4:], bits, rec.Code)
		}
	}
	if rec := call(s, "GET", "/statement", "", "Authorization", "Bearer "+good); rec.Code != http.StatusOK {
		t.Fatalf("the token itself: %d", rec.Code)
	}
}
