package rls_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/memstore"
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
