package rls_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

func reloadFile(limit int) string {
	return "domain: hot\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(limit) + "}\n"
}

// limitNow returns the requests_per_unit the service applies to user=u
// now, peeking (it records nothing).
func (s *service) limitNow(t *testing.T) uint32 {
	t.Helper()
	resp := s.call(t, req("hot", peekDesc("user=u")))
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// waitLimit waits until the service applies want to user=u.
func (s *service) waitLimit(t *testing.T, want uint32, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.limitNow(t) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the limit is still %d after 10s, want %d", what, s.limitNow(t), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHotReload: a rewritten file and a ConfigMap's symlink swap take
// effect without a restart; an invalid file is refused, counted, and the
// old limits keep holding.
func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	// The layout of a mounted ConfigMap: hot.yaml -> ..data/hot.yaml,
	// ..data -> ..v1.
	v1 := filepath.Join(dir, "..v1")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(v1, "hot.yaml"), reloadFile(2))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "hot.yaml"), filepath.Join(dir, "hot.yaml")); err != nil {
		t.Fatal(err)
	}
	svc := start(t, setup{dir: dir, store: memstore.New(memstore.Options{})})
	success := func() float64 {
		return counter(t, svc.reg, "floodgate_config_load_success_total", map[string]string{})
	}
	failure := func() float64 {
		return counter(t, svc.reg, "floodgate_config_load_error_total", map[string]string{})
	}
	if got := svc.limitNow(t); got != 2 {
		t.Fatalf("first limit %d, want 2", got)
	}
	if success() != 1 || failure() != 0 {
		t.Fatalf("config loads: %v ok, %v refused; want 1, 0", success(), failure())
	}

	t.Run("symlink swap", func(t *testing.T) {
		v2 := filepath.Join(dir, "..v2")
		if err := os.Mkdir(v2, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(v2, "hot.yaml"), reloadFile(3))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink("..v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		svc.waitLimit(t, 3, "after the ..data swap")
	})

	t.Run("file rewritten", func(t *testing.T) {
		// Replace the link with a plain file, then rewrite it in place.
		p := filepath.Join(dir, "hot.yaml")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		write(t, p, reloadFile(4))
		svc.waitLimit(t, 4, "after the file was replaced")
		write(t, p, reloadFile(5))
		svc.waitLimit(t, 5, "after the file was rewritten")
	})

	t.Run("invalid file refused, old limits hold", func(t *testing.T) {
		before := failure()
		ok0 := success()
		for range 5 {
			svc.call(t, req("hot", desc("user=held")))
		}
		write(t, filepath.Join(dir, "broken.yaml"), "domain: hot2\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
		deadline := time.Now().Add(10 * time.Second)
		for failure() == before {
			if time.Now().After(deadline) {
				t.Fatal("the invalid file was not refused within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if success() != ok0 {
			t.Errorf("config_load_success went from %v to %v on a refused load", ok0, success())
		}
		// The limit of 5 still holds: user=held used it up.
		resp := svc.call(t, req("hot", desc("user=held")))
		expect(t, resp, over, []rlsv3.RateLimitResponse_Code{over}, []uint32{0})
		if got := svc.limitNow(t); got != 5 {
			t.Errorf("limit %d after the refusal, want 5", got)
		}
		if err := svc.srv.Reload(); err == nil {
			t.Error("Reload of the invalid directory returned no error")
		}
		// A valid change beside the invalid file is not applied either:
		// the configuration is taken whole or not at all.
		refused := failure()
		write(t, filepath.Join(dir, "hot.yaml"), reloadFile(7))
		deadline = time.Now().Add(10 * time.Second)
		for failure() == refused {
			if time.Now().After(deadline) {
				t.Fatal("the directory was not read again within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := svc.limitNow(t); got != 5 {
			t.Errorf("limit %d while broken.yaml is invalid, want 5: half a configuration was applied", got)
		}
		// Fixed: the new domain comes in, the old one stays.
		write(t, filepath.Join(dir, "broken.yaml"), "domain: hot2\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
		deadline = time.Now().Add(10 * time.Second)
		for len(svc.srv.Config().Domains()) != 2 {
			if time.Now().After(deadline) {
				t.Fatal("the fixed file was not loaded within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		expect(t, svc.call(t, req("hot2", desc("k=1"))), ok, []rlsv3.RateLimitResponse_Code{ok}, []uint32{0})
		if got := svc.limitNow(t); got != 7 {
			t.Errorf("limit %d once the directory is valid, want 7", got)
		}
	})
}

// TestReloadThatDropsLimits: removing the last configuration file must
// not be a quiet reload to zero limits, after which every request is
// answered OK. A reload that drops a domain, or every limit, is
// logged at WARN and counted; one that finds no file is refused (counted
// as a failed load, the configuration in force kept) unless
// AllowEmptyConfig.
func TestReloadThatDropsLimits(t *testing.T) {
	type instance struct {
		srv  *rls.Server
		reg  *prometheus.Registry
		logs *syncbuf.Buffer
		dir  string
	}
	newInstance := func(t *testing.T, allowEmpty bool) instance {
		dir := configDir(t, map[string]string{
			"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
			"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		})
		in := instance{reg: prometheus.NewRegistry(), logs: new(syncbuf.Buffer), dir: dir}
		enf := loggingEnforcer(t, slog.New(slog.NewTextHandler(in.logs, nil)))
		// The Watcher waits an hour: only Reload reads the directory again.
		srv, err := rls.New(rls.WithDebounce(rls.Options{Enforcer: enf, ConfigDir: dir, Registerer: in.reg, AllowEmptyConfig: allowEmpty}, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		in.srv = srv
		return in
	}
	// loads returns the counts of loads in force, refused and dropping.
	loads := func(t *testing.T, in instance) [3]float64 {
		var got [3]float64
		for i, name := range []string{"floodgate_config_load_success_total", "floodgate_config_load_error_total", "floodgate_config_load_dropped_total"} {
			got[i] = counter(t, in.reg, name, map[string]string{})
		}
		return got
	}
	remove := func(t *testing.T, in instance, name string) {
		if err := os.Remove(filepath.Join(in.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// decide returns the code of one hit on domain's k=v.
	decide := func(t *testing.T, in instance, domain string) rlsv3.RateLimitResponse_Code {
		resp, err := in.srv.ShouldRateLimit(context.Background(), req(domain, desc("k=v")))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode()
	}
	const dropWarn = `level=WARN msg="the rate-limit configuration reloaded drops limits that were in force`

	t.Run("refused by default", func(t *testing.T) {
		in := newInstance(t, false)
		write(t, filepath.Join(in.dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
		if err := in.srv.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := loads(t, in); got != [3]float64{2, 0, 0} || strings.Contains(in.logs.String(), dropWarn) {
			t.Fatalf("a reload that changes a limit: loads %v, want [2 0 0], and no warning:\n%s", got, in.logs)
		}
		remove(t, in, "b.yaml")
		if err := in.srv.Reload(); err != nil {
			t.Fatal(err)
		}
		if got := loads(t, in); got != [3]float64{3, 0, 1} {
			t.Fatalf("a reload that drops domain b: loads %v, want [3 0 1]", got)
		}
		if want := dropWarn + `: the requests of a dropped domain are answered OK" dropped_domains=[b] limits_before=2 limits=1 files=1`; !strings.Contains(in.logs.String(), want) {
			t.Fatalf("the logs do not say %s:\n%s", want, in.logs)
		}
		if got := decide(t, in, "b"); got != ok {
			t.Fatalf("domain b after it was dropped: %v, want OK", got)
		}
		remove(t, in, "a.yaml")
		err := in.srv.Reload()
		if !errors.Is(err, rlconfig.ErrEmptyConfig) || !errors.Is(err, rlconfig.ErrInvalidConfig) {
			t.Fatalf("Reload of an emptied directory = %v; want ErrEmptyConfig, an ErrInvalidConfig", err)
		}
		if got := loads(t, in); got != [3]float64{3, 1, 1} {
			t.Fatalf("a reload that finds no file: loads %v, want [3 1 1]: refused, counted as a failed load", got)
		}
		if want := `level=ERROR msg="rate-limit configuration refused: the directory holds no configuration file`; strings.Count(in.logs.String(), want) != 1 {
			t.Fatalf("the logs do not say %s once:\n%s", want, in.logs)
		}
		if d := in.srv.Config().Domains(); len(d) != 1 || d[0] != "a" {
			t.Fatalf("domains in force %v, want [a]: the configuration in force stays", d)
		}
		if got := []rlsv3.RateLimitResponse_Code{decide(t, in, "a"), decide(t, in, "a"), decide(t, in, "a")}; got[0] != ok || got[1] != ok || got[2] != over {
			t.Fatalf("domain a after the refusal: %v, want OK, OK, OVER_LIMIT: its limit of 2 still holds", got)
		}
	})

	t.Run("AllowEmptyConfig", func(t *testing.T) {
		in := newInstance(t, true)
		remove(t, in, "a.yaml")
		remove(t, in, "b.yaml")
		if err := in.srv.Reload(); err != nil {
			t.Fatalf("Reload of an emptied directory with AllowEmptyConfig: %v", err)
		}
		if got := loads(t, in); got != [3]float64{2, 0, 1} {
			t.Fatalf("a reload to no file, allowed: loads %v, want [2 0 1]", got)
		}
		if want := dropWarn + `: the requests of a dropped domain are answered OK" dropped_domains="[a b]" limits_before=2 limits=0 files=0`; !strings.Contains(in.logs.String(), want) {
			t.Fatalf("the logs do not say %s:\n%s", want, in.logs)
		}
		if got := decide(t, in, "a"); got != ok {
			t.Fatalf("domain a with no configuration: %v, want OK", got)
		}
	})
}
