package rlconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/rlconfig"
)

type reload struct {
	cfg *rlconfig.Config
	err error
}

// watch starts a Watcher on dir whose reloads arrive on the returned
// channel; it is closed at the end of the test.
func watch(t *testing.T, dir string) (*rlconfig.Watcher, <-chan reload) {
	t.Helper()
	ch := make(chan reload, 100)
	w, err := rlconfig.Watch(dir, rlconfig.WatchOptions{
		Debounce: 20 * time.Millisecond,
		OnReload: func(cfg *rlconfig.Config, err error) { ch <- reload{cfg, err} },
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w, ch
}

// waitFor reads reloads until ok accepts one, failing after 10s.
func waitFor(t *testing.T, ch <-chan reload, what string, ok func(reload) bool) reload {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			if ok(r) {
				return r
			}
		case <-timeout:
			t.Fatalf("no reload %s within 10s", what)
		}
	}
}

// limitOf returns the requests per unit that cfg applies to (k, x) in
// domain d, or -1.
func limitOf(cfg *rlconfig.Config) int64 {
	m := cfg.Match("d", e("k", "x"))
	if len(m.Limits) == 0 {
		return -1
	}
	return m.Limits[0].RequestsPerUnit
}

func limitFile(n string) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + n + "}\n"
}

func succeeded(want int64) func(reload) bool {
	return func(r reload) bool { return r.err == nil && limitOf(r.cfg) == want }
}

func TestWatchRewrite(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": limitFile("1")})
	w, ch := watch(t, dir)
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}
	write(t, filepath.Join(dir, "a.yaml"), limitFile("2"))
	waitFor(t, ch, "after a rewrite", succeeded(2))
	if got := limitOf(w.Config()); got != 2 {
		t.Errorf("Config after the reload: %d", got)
	}

	// An invalid file is refused with its problems; the old limits stay.
	write(t, filepath.Join(dir, "b.yaml"), "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")
	write(t, filepath.Join(dir, "a.yaml"), limitFile("3")+"    bogus: 1\n")
	r := waitFor(t, ch, "refusing an invalid file", func(r reload) bool {
		return r.err != nil && strings.Contains(r.err.Error(), "bogus") && strings.Contains(r.err.Error(), `b.yaml: e.k: invalid rate limit unit "eon"`)
	})
	if r.cfg != nil || !errors.Is(r.err, rlconfig.ErrInvalidConfig) {
		t.Errorf("refusal: %v %v", r.cfg, r.err)
	}
	if got := limitOf(w.Config()); got != 2 {
		t.Errorf("Config after a refused reload: %d, want the old 2", got)
	}

	// Fixed again: taken.
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), limitFile("4"))
	waitFor(t, ch, "after the fix", succeeded(4))
}

// TestWatchConfigMap swaps the ..data symbolic link as the kubelet does
// for a ConfigMap volume: the files are links into ..data, which links
// to a timestamped directory; an update writes a new directory and
// renames a new link over ..data.
func TestWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, files map[string]string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for f, body := range files {
			write(t, filepath.Join(dir, name, f), body)
			link := filepath.Join(dir, f)
			if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
				symlink(t, filepath.Join("..data", f), link)
			}
		}
		symlink(t, name, filepath.Join(dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_30_10_00_00.1", map[string]string{"a.yaml": limitFile("1")})
	w, ch := watch(t, dir)
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}

	version("..2026_11_30_10_05_00.2", map[string]string{"a.yaml": limitFile("2"), "b.yaml": "domain: other\n"})
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_30_10_00_00.1")); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, ch, "after the ..data swap", func(r reload) bool {
		if r.err != nil {
			t.Errorf("a valid swap was refused on the way: %v", r.err)
		}
		return succeeded(2)(r)
	})
	if d := r.cfg.Domains(); len(d) != 2 {
		t.Errorf("domains after the swap: %v", d)
	}

	// An invalid version is refused and the old one holds.
	version("..2026_11_30_10_10_00.3", map[string]string{"a.yaml": limitFile("-5"), "b.yaml": "domain: other\n"})
	waitFor(t, ch, "refusing the invalid version", func(r reload) bool {
		return r.err != nil && strings.Contains(r.err.Error(), "a.yaml: d.k: requests_per_unit -5")
	})
	if got := limitOf(w.Config()); got != 2 {
		t.Errorf("Config after a refused swap: %d, want the old 2", got)
	}
}

// TestWatchDirectorySwap replaces the watched directory itself, a
// symbolic link, as envoyproxy/ratelimit's runtime root is swapped.
func TestWatchDirectorySwap(t *testing.T) {
	root := t.TempDir()
	for v, n := range map[string]string{"v1": "1", "v2": "2"} {
		if err := os.Mkdir(filepath.Join(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, v, "a.yaml"), limitFile(n))
	}
	current := filepath.Join(root, "current")
	symlink(t, "v1", current)
	w, ch := watch(t, current)
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}
	symlink(t, "v2", filepath.Join(root, "next"))
	if err := os.Rename(filepath.Join(root, "next"), current); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "after the directory swap", succeeded(2))

	// Edits in the new target are seen too.
	write(t, filepath.Join(root, "v2", "a.yaml"), limitFile("3"))
	waitFor(t, ch, "after an edit in the new directory", succeeded(3))
}

func TestWatchRefusesInvalidStart(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": limitFile("x")})
	w, err := rlconfig.Watch(dir, rlconfig.WatchOptions{})
	if err == nil {
		w.Close()
		t.Fatal("Watch accepted an invalid configuration")
	}
	if !errors.Is(err, rlconfig.ErrInvalidConfig) {
		t.Errorf("error: %v", err)
	}
	if _, err := rlconfig.Watch(filepath.Join(dir, "missing"), rlconfig.WatchOptions{}); err == nil {
		t.Error("Watch accepted a missing directory")
	}
}

func TestWatchReloadAndClose(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": limitFile("1")})
	calls := make(chan struct{}, 100)
	w, err := rlconfig.Watch(dir, rlconfig.WatchOptions{OnReload: func(*rlconfig.Config, error) { calls <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), limitFile("5"))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(w.Config()); got != 5 {
		t.Errorf("after Reload: %d", got)
	}
	write(t, filepath.Join(dir, "a.yaml"), "domain: [")
	if err := w.Reload(); !errors.Is(err, rlconfig.ErrInvalidConfig) {
		t.Errorf("Reload of an invalid file: %v", err)
	}
	if got := limitOf(w.Config()); got != 5 {
		t.Errorf("after a refused Reload: %d", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	n := len(calls)
	write(t, filepath.Join(dir, "a.yaml"), limitFile("6"))
	time.Sleep(300 * time.Millisecond) // nothing may happen; give it the chance
	if len(calls) != n {
		t.Error("OnReload ran after Close")
	}
	if got := limitOf(w.Config()); got != 5 {
		t.Errorf("Config after Close: %d", got)
	}
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestWatchConcurrentReaders matches from several goroutines while the
// configuration is reloaded under them; run with -race.
func TestWatchConcurrentReaders(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": limitFile("1")})
	w, ch := watch(t, dir)
	stop := make(chan struct{})
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := limitOf(w.Config()); n < 1 || n > 5 {
					t.Errorf("a reader saw limit %d", n)
					return
				}
			}
		}()
	}
	for n := int64(2); n <= 5; n++ {
		write(t, filepath.Join(dir, "a.yaml"), limitFile(strconv.FormatInt(n, 10)))
		waitFor(t, ch, "under readers", succeeded(n))
	}
	close(stop)
	for range 4 {
		<-done
	}
}

// Watch of one file reads it alone, ignores its neighbours (valid or not),
// and sees the file replaced by a rename, as editors write it.
func TestWatchFile(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("1"), "other.yaml": "domain: d\nnot: valid\n"})
	ch := make(chan reload, 100)
	w, err := rlconfig.Watch(filepath.Join(dir, "limits.yaml"), rlconfig.WatchOptions{
		Debounce: 20 * time.Millisecond,
		OnReload: func(cfg *rlconfig.Config, err error) { ch <- reload{cfg, err} },
	})
	if err != nil {
		t.Fatalf("Watch of a file beside an invalid neighbour: %v", err)
	}
	defer w.Close()
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}
	tmp := filepath.Join(dir, ".limits.yaml.tmp")
	write(t, tmp, limitFile("7"))
	if err := os.Rename(tmp, filepath.Join(dir, "limits.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "after a rename over the file", succeeded(7))
	if got := w.Config().Files(); len(got) != 1 || got[0] != "limits.yaml" {
		t.Errorf("files read: %v, want [limits.yaml]", got)
	}
	// A file that LoadDir would not read is refused by name, even valid.
	for _, name := range []string{"limits.json", ".hidden.yaml"} {
		bad := filepath.Join(dir, name)
		write(t, bad, limitFile("1"))
		if _, err := rlconfig.Watch(bad, rlconfig.WatchOptions{}); !errors.Is(err, rlconfig.ErrInvalidConfig) {
			t.Errorf("Watch(%s): %v, want ErrInvalidConfig", bad, err)
		}
	}
	if _, err := rlconfig.Watch(filepath.Join(dir, "missing.yaml"), rlconfig.WatchOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch of a missing file: %v, want os.ErrNotExist", err)
	}
}

// TestWatchRuntimeRootSwap swaps a symbolic link above the watched
// directory, as envoyproxy/ratelimit's deployments swap RUNTIME_ROOT
// (/srv/runtime_data/current) while the configuration is read from
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
func TestWatchRuntimeRootSwap(t *testing.T) {
	root := t.TempDir()
	for v, n := range map[string]string{"v1": "1", "v2": "2"} {
		if err := os.MkdirAll(filepath.Join(root, v, "ratelimit", "config"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, v, "ratelimit", "config", "a.yaml"), limitFile(n))
	}
	current := filepath.Join(root, "current")
	symlink(t, "v1", current)
	w, ch := watch(t, filepath.Join(current, "ratelimit", "config"))
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}
	symlink(t, "v2", filepath.Join(root, "next"))
	if err := os.Rename(filepath.Join(root, "next"), current); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "after the runtime root swap", succeeded(2))

	// Edits in the new target are seen too, and none in the old one.
	write(t, filepath.Join(root, "v1", "ratelimit", "config", "a.yaml"), limitFile("9"))
	write(t, filepath.Join(root, "v2", "ratelimit", "config", "a.yaml"), limitFile("3"))
	waitFor(t, ch, "after an edit in the new directory", succeeded(3))
	if got := limitOf(w.Config()); got != 3 {
		t.Errorf("limit %d after editing the old and the new directory, want the new one's 3", got)
	}
}

// TestWatchLinkToSwappedRoot watches a symbolic link to a directory under
// a runtime root that is itself a link, swapped: the link met resolving
// the first link is watched too.
func TestWatchLinkToSwappedRoot(t *testing.T) {
	root := t.TempDir()
	for v, n := range map[string]string{"v1": "1", "v2": "2"} {
		if err := os.MkdirAll(filepath.Join(root, v, "config"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, v, "config", "a.yaml"), limitFile(n))
	}
	symlink(t, "v1", filepath.Join(root, "current"))
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, filepath.Join("..", "current", "config"), filepath.Join(root, "etc", "ratelimit"))
	w, ch := watch(t, filepath.Join(root, "etc", "ratelimit"))
	if got := limitOf(w.Config()); got != 1 {
		t.Fatalf("first limit %d", got)
	}
	symlink(t, "v2", filepath.Join(root, "next"))
	if err := os.Rename(filepath.Join(root, "next"), filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "after the swap of the root the link points under", succeeded(2))
}
