package rlconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TestConfigMapSwapIsAtomic reloads a ConfigMap volume while it is
// swapped again and again, as the kubelet swaps it: a new timestamped
// directory, the ..data link renamed onto it, the old directory removed.
// Every reload must read one version whole: a.yaml and b.yaml of one
// version (never one of each, which could drop or duplicate a domain),
// and never fail because the old version vanished mid-read.
func TestConfigMapSwapIsAtomic(t *testing.T) {
	dir := t.TempDir()
	file := func(domain string, v int) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + strconv.Itoa(v) + "}\n"
	}
	version := func(v int) {
		name := fmt.Sprintf("..v%06d", v)
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Error(err)
			return
		}
		for _, d := range []string{"a", "b"} {
			if err := os.WriteFile(filepath.Join(dir, name, d+".yaml"), []byte(file(d, v)), 0o644); err != nil {
				t.Error(err)
			}
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Error(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Error(err)
		}
		if v > 1 {
			os.RemoveAll(filepath.Join(dir, fmt.Sprintf("..v%06d", v-1)))
		}
	}
	version(1)
	for _, d := range []string{"a", "b"} {
		if err := os.Symlink(filepath.Join("..data", d+".yaml"), filepath.Join(dir, d+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	w, err := rlconfig.Watch(dir, rlconfig.WatchOptions{Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := 2; ; v++ {
			select {
			case <-stop:
				return
			default:
				version(v)
				time.Sleep(5 * time.Millisecond) // a swap every few ms, far beyond a kubelet's pace
			}
		}
	}()
	var mixed, failed int
	deadline := time.Now().Add(2 * time.Second)
	reloads := 0
	for ; time.Now().Before(deadline); reloads++ {
		if err := w.Reload(); err != nil {
			failed++
			if failed == 1 {
				t.Logf("a refused reload: %v", err)
			}
			continue
		}
		cfg := w.Config()
		a, b := cfg.Match("a", []rlmatch.Entry{{Key: "k", Value: "x"}}), cfg.Match("b", []rlmatch.Entry{{Key: "k", Value: "x"}})
		if len(a.Limits) != 1 || len(b.Limits) != 1 || a.Limits[0].RequestsPerUnit != b.Limits[0].RequestsPerUnit {
			mixed++
			if mixed == 1 {
				t.Logf("a mixed configuration: %s", cfg)
			}
		}
	}
	close(stop)
	wg.Wait()
	if mixed > 0 || failed > 0 {
		t.Errorf("of %d reloads during swaps, %d mixed two versions and %d failed; want none", reloads, mixed, failed)
	}
}

// TestConfigMapWithOwnFiles: beside a ConfigMap's links into ..data, a
// file of the directory's own (a copied volume being edited) is read, and
// wins over the version's file of its name; the version's file whose
// link is not made yet is read too.
func TestConfigMapWithOwnFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "..v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"a.yaml": limitFile("1"), "b.yaml": "domain: b\n", "new.yaml": "domain: new\n"} {
		write(t, filepath.Join(dir, "..v1", name), body)
	}
	symlink(t, "..v1", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "b.yaml"), filepath.Join(dir, "b.yaml"))
	write(t, filepath.Join(dir, "a.yaml"), limitFile("7"))
	write(t, filepath.Join(dir, "own.yaml"), "domain: own\n")
	cfg, err := rlconfig.LoadDir(dir, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := limitOf(cfg); got != 7 {
		t.Errorf("limit %d, want the directory's own a.yaml's 7", got)
	}
	if got := cfg.Domains(); !slices.Equal(got, []string{"b", "d", "new", "own"}) {
		t.Errorf("domains %v, want b, d, new and own", got)
	}
}
