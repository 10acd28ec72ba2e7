package rlconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The one file that Watch is given is required, at every reload as at the first:
// its removal is refused (OnReload gets the error) and the limits in force
// stay, rather than an empty configuration that drops every live limit
// and is reported as a successful reload.
func TestWatchFileRemovedKeepsTheLimits(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("3")})
	path := filepath.Join(dir, "limits.yaml")
	w, ch := watch(t, path)
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
	w, ch := watch(t, "limits.yaml")
	write(t, "limits.yaml", limitFile("4"))
	waitFor(t, ch, "after a rewrite of ./limits.yaml", succeeded(4))
	if got := limitOf(w.Config()); got != 4 {
		t.Fatalf("limit %d, want 4", got)
	}
}

// OnReload is called for a change of the files read, and for nothing
// else: a file written beside the watched one and renamed over it, an
// editor's swap file, a rewrite that changes nothing. A service counts
// each call as a reload, so that a change written the usual way (a
// temporary file, then a rename) is counted once, however slowly it is
// written. A refused file, written again unchanged, is refused once; the
// file in force written back after it is a change again.
func TestWatchReportsChangesOnly(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("3")})
	path := filepath.Join(dir, "limits.yaml")
	w, ch := watch(t, path)
	// next returns the next call, which must come within 10s.
	next := func(what string) reload {
		t.Helper()
		return waitFor(t, ch, what, func(reload) bool { return true })
	}
	// Each step leaves time for a reload (many debounces) before the
	// next change, so that an event reported wrongly is seen before the
	// change's own call.
	settle := func() { time.Sleep(200 * time.Millisecond) }
	// replace writes path whole, as configuration tools do: no read
	// sees it half written.
	replace := func(body string) {
		t.Helper()
		write(t, path+".new", body)
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}

	write(t, path+".tmp", limitFile("4"))
	write(t, filepath.Join(dir, ".limits.yaml.swp"), "swap")
	settle()
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	if r := next("after the rename"); r.err != nil || limitOf(r.cfg) != 4 {
		t.Fatalf("first call after a temporary file and a rename: limit %d, error %v; want the rename's limit 4 and no call for the temporary file", limitOf(r.cfg), r.err)
	}
	settle()
	replace(limitFile("4"))
	settle()
	broken := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
	replace(broken)
	if r := next("after a broken file"); r.err == nil {
		t.Fatalf("first call after an unchanged rewrite and a broken file: limit %d, want the broken file's error and no call for the rewrite", limitOf(r.cfg))
	}
	settle()
	replace(broken)
	settle()
	replace(limitFile("4"))
	if r := next("after the file in force was written back"); r.err != nil || limitOf(r.cfg) != 4 {
		t.Fatalf("first call after the broken file again and the old one back: limit %d, error %v; want limit 4 and no call for the broken file unchanged", limitOf(r.cfg), r.err)
	}
	settle()
	if n := len(ch); n != 0 {
		t.Errorf("%d calls more, want none", n)
	}
	if got := limitOf(w.Config()); got != 4 {
		t.Errorf("limit in force %d, want 4", got)
	}
}

// In a directory, the entries skipped are part of what a read found
// (Config.Skipped lists them): one added is a call, with the old limits;
// one rewritten, whose content nobody reads, and a file whose name starts
// with a dot, are none. The WatchOptions.OnReload doc says so.
func TestWatchDirectoryReportsSkippedEntries(t *testing.T) {
	dir := writeDir(t, map[string]string{"limits.yaml": limitFile("3")})
	_, ch := watch(t, dir)
	next := func(what string) reload {
		t.Helper()
		return waitFor(t, ch, what, func(reload) bool { return true })
	}
	write(t, filepath.Join(dir, "notes.txt"), "one")
	if r := next("after notes.txt was added"); r.err != nil || limitOf(r.cfg) != 3 || fmt.Sprint(r.cfg.Skipped()) != "[notes.txt]" {
		t.Fatalf("call after notes.txt was added: limit %d, error %v, skipped %v; want 3, none, [notes.txt]", limitOf(r.cfg), r.err, r.cfg.Skipped())
	}
	time.Sleep(200 * time.Millisecond) // many debounces
	write(t, filepath.Join(dir, "notes.txt"), "two")
	write(t, filepath.Join(dir, ".limits.yaml.swp"), "swap")
	time.Sleep(200 * time.Millisecond)
	write(t, filepath.Join(dir, "limits.yaml"), limitFile("4"))
	if r := next("after limits.yaml changed"); r.err != nil || limitOf(r.cfg) != 4 {
		t.Fatalf("first call after notes.txt rewritten, a swap file and limits.yaml changed: limit %d, error %v; want 4 and no call before it", limitOf(r.cfg), r.err)
	}
}
