package bank

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaults(t *testing.T) {
	c, err := ConfigFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.PIX.Limit != 10 || c.PIX.Window != time.Minute || c.Statement.Limit != 30 ||
		c.LoginIP.Limit != 10 || c.LoginIP.Window != 10*time.Minute || c.LoginAccount.Limit != 5 ||
		c.FailurePIX != FailClosed || c.FailureStatement != FailOpen || c.FailureLogin != FailClosed || c.ListenAddr != ":8080" ||
		c.MetricsAddr != "127.0.0.1:9090" {
		t.Fatalf("defaults differ from the seed: %+v", c)
	}
}

func TestConfigListsEveryProblem(t *testing.T) {
	_, err := ConfigFromEnv(env(map[string]string{
		"REDIS_URL":         "redis://127.0.0.1:6379",
		"TRUSTED_PROXIES":   "10.0.0.0/8, not-an-ip",
		"LIMIT_PIX":         "ten/1m",
		"LIMIT_STATEMENT":   "0/1m",
		"FAILURE_STATEMENT": "maybe",
		"LOG_LEVEL":         "loud",
		"DECISION_TIMEOUT":  "-1s",
		"LISTEN_ADDR":       ":8080",
		"METRICS_ADDR":      ":8080",
	}))
	if err == nil {
		t.Fatal("accepted a bad configuration")
	}
	for _, name := range []string{"TOKEN_SECRET", "TRUSTED_PROXIES", "LIMIT_PIX", "LIMIT_STATEMENT", "FAILURE_STATEMENT", "LOG_LEVEL", "DECISION_TIMEOUT", "METRICS_ADDR"} {
		if !strings.Contains(err.Error(), name+":") {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
	if strings.Contains(err.Error(), "10.0.0.0/8") {
		t.Errorf("error blames a valid proxy:\n%v", err)
	}
}

func TestConfigRedactsTheSecret(t *testing.T) {
	c, err := ConfigFromEnv(env(map[string]string{"TOKEN_SECRET": "s3cr3t-" + testSecret}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.LogValue().String(), "s3cr3t") {
		t.Fatal("LogValue leaks TOKEN_SECRET")
	}
}

// TOKEN_SECRET must look random: long enough, and not built from a
// handful of characters.
func TestConfigRefusesWeakSecrets(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		ok           bool
	}{
		{"one repeated character", strings.Repeat("a", 64), false},
		{"a short pattern", strings.Repeat("abc123", 8), false},
		{"too short", "9f86d081884c7d65", false},
		{"32 random hex digits", "9f86d081884c7d659a2feaa0c55ad015", true},
		{"64 random hex digits", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromEnv(env(map[string]string{"TOKEN_SECRET": tc.secret}))
			if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "TOKEN_SECRET:") {
				t.Fatalf("TOKEN_SECRET %q: %v, want ok=%v", tc.secret, err, tc.ok)
			}
			if strings.Contains(fmt.Sprint(err), tc.secret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}
