package rls_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestNewOptions: New lists every problem of its options, and a fixed
// Config with no Registerer serves its own metrics.
func TestNewOptions(t *testing.T) {
	enf := memEnforcer(t)
	cfg, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte(featureConfig)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "a.yaml") // a valid file, but not a directory
	if err := os.WriteFile(file, []byte(featureConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts    rls.Options
		want    []string
		invalid bool // wraps ErrInvalidOptions
	}{
		{rls.Options{}, []string{"Enforcer is required", "set ConfigDir or Config"}, true},
		{rls.Options{Enforcer: enf, Config: cfg, ConfigDir: "x"}, []string{"not both"}, true},
		{rls.Options{Enforcer: enf, Config: cfg, NearLimitRatio: -0.1}, []string{"NearLimitRatio -0.1 is not above 0 and at most 1"}, true},
		{rls.Options{Enforcer: enf, Config: cfg, NearLimitRatio: 1.5}, []string{"NearLimitRatio 1.5 is not above 0 and at most 1"}, true},
		{rls.Options{Enforcer: enf, ConfigDir: t.TempDir() + "/missing"}, []string{"rlconfig"}, false},
		{rls.Options{Enforcer: enf, ConfigDir: file}, []string{"ConfigDir " + file + " is not a directory"}, true},
	} {
		_, err := rls.New(c.opts)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want an error saying %q", c.opts, err, w)
			}
		}
		if errors.Is(err, rls.ErrInvalidOptions) != c.invalid {
			t.Errorf("%v: errors.Is(err, ErrInvalidOptions) = %v", err, !c.invalid)
		}
	}

	srv, err := rls.New(rls.Options{Enforcer: enf, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Config() != cfg || srv.Reload() != nil {
		t.Error("a fixed Config is not the one in force, or Reload did something")
	}
	web := httptest.NewServer(srv.DebugHandler())
	defer web.Close()
	res, err := web.Client().Get(web.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "floodgate_config_load_success_total 1") {
		t.Errorf("/metrics of the Server's own registry: %s", body)
	}
	if res, err := web.Client().Post(web.URL+"/json", "application/json", strings.NewReader("{}")); err != nil || res.StatusCode != 404 {
		t.Errorf("DebugHandler serves /json: %v %v", res.Status, err)
	}
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
	// A Gatherer of the caller's is what /metrics serves.
	mine := prometheus.NewRegistry()
	mine.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "mine_total", Help: "h"}))
	srv2, err := rls.New(rls.Options{Enforcer: enf, Config: cfg, Gatherer: mine})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	web2 := httptest.NewServer(srv2.Handler())
	defer web2.Close()
	res, err = web2.Client().Get(web2.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "mine_total 0") || strings.Contains(string(body), "floodgate_rls") {
		t.Errorf("/metrics with Options.Gatherer: %s", body)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A fixed Config of no file (the xDS mode's placeholder before its first
// configuration) is not a load: the Server says it has none, and
// floodgate_config_load_success_total counts only the first configuration
// applied.
func TestPlaceholderConfigIsNoLoad(t *testing.T) {
	empty, err := rlconfig.Parse(nil, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	srv, err := rls.New(rls.Options{Enforcer: loggingEnforcer(t, slog.New(slog.NewTextHandler(&logs, nil))), Config: empty, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if n := counter(t, reg, "floodgate_config_load_success_total", nil); n != 0 || !strings.Contains(logs.String(), "no rate-limit configuration yet") || strings.Contains(logs.String(), "loaded") {
		t.Fatalf("at New with no configuration: %v loads counted, logs:\n%s\nwant none counted and a line saying there is none", n, logs.String())
	}
	cfg, err := rlconfig.Parse(map[string][]byte{"a.yaml": []byte(featureConfig)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, reg, "floodgate_config_load_success_total", nil); n != 1 {
		t.Errorf("after the first configuration: %v loads counted, want 1", n)
	}
}
