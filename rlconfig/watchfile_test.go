package rlconfig_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/rlconfig"
)

// The one file that Watch is given is required, at every reload as at the first:
// its removal is refused (OnReload gets the error) and the limits in force
// stay, rather than an empty configuration that drops every live limit
// and is reported as a successful reload.
func TestWatchFileRemovedKeepsTheLimits(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("3")})
	path := filepath.Join(dir, "limits.yaml")
	ch := make(chan reload, 100)
	w, err := rlconfig.Watch(path, rlconfig.WatchOptions{
		Debounce: 20 * time.Millisecond,
		OnReload: func(cfg *rlconfig.Config, err error) { ch <- reload{cfg, err} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "after the file's removal", func(r reload) bool { return true })
	if got := limitOf(w.Config()); got != 3 {
		t.Fatalf("limit after the file was removed: %d, want 3 (the limits in force stay)", got)
	}
	if err := w.Reload(); err == nil {
		t.Fatal("Reload of a removed file: nil error, want the file's absence")
	}
	write(t, path, limitFile("4"))
	waitFor(t, ch, "after the file came back", succeeded(4))
}

// A file named relative to the working directory ("limits.yaml", as
// LIMITS_FILE=limits.yaml gives it) is watched like any other: the events
// of its directory "." are not taken for a sibling's.
func TestWatchFileInTheWorkingDirectory(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("3")})
	t.Chdir(dir)
	ch := make(chan reload, 100)
	w, err := rlconfig.Watch("limits.yaml", rlconfig.WatchOptions{
		Debounce: 20 * time.Millisecond,
		OnReload: func(cfg *rlconfig.Config, err error) { ch <- reload{cfg, err} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write(t, "limits.yaml", limitFile("4"))
	waitFor(t, ch, "after a rewrite of ./limits.yaml", succeeded(4))
	if got := limitOf(w.Config()); got != 4 {
		t.Fatalf("limit %d, want 4", got)
	}
}
