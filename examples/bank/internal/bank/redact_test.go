package bank

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://user:S3cret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"redis://:S3cret@host", "redis://xxxxx@host"},
		{"redis://t0ken@host", "redis://xxxxx@host"},
		{"rediss://user:S3cret%zzPw@host/", "rediss://user:xxxxx@host/"},
		{"redis://user:p@ss/w@rd@host/", "redis://user:xxxxx@host/"},
		{"redis://host:6379", "redis://host:6379"},
		{"not a url", "not a url"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// An unparsable REDIS_URL is reported without its password, however the
// error spells it, and the error still matches what it wraps.
func TestRedisURLErrorsHoldNoPassword(t *testing.T) {
	for _, raw := range []string{
		"redis://user:S3cret%zzPw@127.0.0.1:6379/",     // url.Parse: invalid escape
		"redis://:S3cretPw@[::1",                       // url.Parse: missing ']'
		"redis://user:S3cret%21Pw@127.0.0.1:6379/db",   // the store: bad database
		`redis://user:S3cret"Pw@127.0.0.1:6379/?x=%zz`, // quoted by %q
	} {
		t.Run(raw, func(t *testing.T) {
			cfg, err := ConfigFromEnv(env(map[string]string{"REDIS_URL": raw, "TOKEN_SECRET": testSecret}))
			if err != nil {
				t.Fatal(err)
			}
			app, err := NewApp(context.Background(), cfg, slog.New(slog.DiscardHandler), AppOptions{})
			if err == nil {
				app.Close()
				t.Fatal("NewApp accepted a bad REDIS_URL")
			}
			msg := fmt.Sprint(err)
			if strings.Contains(msg, "S3cret") || strings.Contains(msg, "Pw") {
				t.Fatalf("the error shows the password: %s", msg)
			}
			if !strings.Contains(msg, "REDIS_URL") {
				t.Fatalf("the error does not name REDIS_URL: %s", msg)
			}
			t.Logf("error: %s", msg)
		})
	}
	wrapped := redactErr(fmt.Errorf("x: %w: redis://u:S3cretPw@h", floodgate.ErrInvalidRule), "redis://u:S3cretPw@h")
	if !errors.Is(wrapped, floodgate.ErrInvalidRule) || strings.Contains(wrapped.Error(), "S3cret") {
		t.Fatalf("redactErr: %v; want the sentinel kept and the password gone", wrapped)
	}
}
