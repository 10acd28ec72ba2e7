package bank

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTokens(t *testing.T) {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	k := NewKeys([]byte("secret"))
	other := NewKeys([]byte("other secret"))
	tok := k.Token("acct1", now.Add(time.Hour))
	if a, err := k.VerifyToken(tok, now); err != nil || a != "acct1" {
		t.Fatalf("VerifyToken = %q, %v", a, err)
	}
	cred := []byte("credential 1")
	cookie := k.DeviceCookie("acct1", "dev1", cred, now.Add(time.Hour))
	if d, err := k.VerifyDeviceCookie(cookie, "acct1", cred, now); err != nil || d != "dev1" {
		t.Fatalf("VerifyDeviceCookie = %q, %v", d, err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"expired token", func() error { _, err := k.VerifyToken(tok, now.Add(time.Hour)); return err }()},
		{"token of another secret", func() error { _, err := k.VerifyToken(other.Token("acct1", now.Add(time.Hour)), now); return err }()},
		{"tampered account", func() error { _, err := k.VerifyToken(strings.Replace(tok, "acct1", "acct2", 1), now); return err }()},
		{"cookie as token", func() error { _, err := k.VerifyToken(cookie, now); return err }()},
		{"token as cookie", func() error { _, err := k.VerifyDeviceCookie(tok, "acct1", cred, now); return err }()},
		{"cookie of another account", func() error { _, err := k.VerifyDeviceCookie(cookie, "acct2", cred, now); return err }()},
		{"cookie of an old credential", func() error {
			_, err := k.VerifyDeviceCookie(cookie, "acct1", []byte("credential 2"), now)
			return err
		}()},
		{"garbage", func() error { _, err := k.VerifyToken("x.y.z", now); return err }()},
		{"empty", func() error { _, err := k.VerifyToken("", now); return err }()},
		{"huge", func() error { _, err := k.VerifyToken(strings.Repeat("a", 1<<20), now); return err }()},
	} {
		if !errors.Is(tc.err, ErrBadToken) {
			t.Errorf("%s: got %v, want ErrBadToken", tc.name, tc.err)
		}
	}
	if k.AccountID("52998224725") == other.AccountID("52998224725") || strings.Contains(k.AccountID("52998224725"), "52998224725") {
		t.Error("AccountID must be keyed and must not contain the document")
	}
}
