package bank

import (
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
	c, err := ConfigFromEnv(env(map[string]string{"TOKEN_SECRET": strings.Repeat("s3cr3t", 8)}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.LogValue().String(), "s3cr3t") {
		t.Fatal("LogValue leaks TOKEN_SECRET")
	}
}
