package rls_test

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestSkippedFilesWarned: envoyproxy/ratelimit reads every file of its
// directory, subdirectories included; floodgate reads the *.yaml and
// *.yml files at the top. What it does not read is logged as a warning
// at start and at each reload, and listed by /rlconfig, so a switching
// deployment does not lose limits unseen; so is a replaces naming no
// limit. A quota_mode limit is interpreted, and not warned of.
func TestSkippedFilesWarned(t *testing.T) {
	dir := configDir(t, map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1, name: q}\n" +
			"  - key: r\n    rate_limit: {unit: hour, requests_per_unit: 2, replaces: [{name: q}, {name: typo}]}\n",
		"edge":     "domain: edge\n",
		".hidden":  "domain: h\n",
		"notes.md": "# notes\n",
	})
	if err := os.Mkdir(filepath.Join(dir, "more"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	enf := loggingEnforcer(t, slog.New(slog.NewTextHandler(&logs, nil)))
	srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if want := `level=WARN msg="entries of the configuration directory not read`; strings.Count(logs.String(), want) != 1 ||
		!strings.Contains(logs.String(), "skipped=\"[edge more/ notes.md]\"") {
		t.Errorf("the start's logs do not warn once of edge, more/ and notes.md:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "quota_mode") {
		t.Errorf("the start's logs warn of a.q's quota_mode, which is interpreted:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `msg="a replaces names no limit of the configuration, and replaces nothing" replaces="[a.r replaces \"typo\"]"`) {
		t.Errorf("the start's logs do not warn of a.r's replaces of typo alone:\n%s", logs.String())
	}
	hs := httptest.NewServer(srv.DebugHandler())
	defer hs.Close()
	if _, body := get(t, hs.URL+"/rlconfig"); !strings.Contains(body, "# not read (not *.yaml or *.yml, or a subdirectory): edge, more/, notes.md\n") {
		t.Errorf("/rlconfig does not list what was not read:\n%s", body)
	}
	if err := os.Rename(filepath.Join(dir, "edge"), filepath.Join(dir, "edge.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "skipped=\"[more/ notes.md]\"") {
		t.Errorf("the reload's logs do not warn of more/ and notes.md:\n%s", logs.String())
	}
	if got := srv.Config().Domains(); len(got) != 2 || got[1] != "edge" {
		t.Errorf("domains after renaming edge to edge.yaml: %v", got)
	}
}

// TestRefusalLoggedByEnforcer: the Server logs to its Enforcer's logger,
// so a refused reload reaches someone even though no logger was given to
// the Server (it used to be discarded then).
func TestRefusalLoggedByEnforcer(t *testing.T) {
	dir := configDir(t, map[string]string{"a.yaml": "domain: a\n"})
	var logs syncbuf.Buffer
	enf := loggingEnforcer(t, slog.New(slog.NewTextHandler(&logs, nil)))
	// The Watcher waits an hour: only Reload reads the directory again.
	srv, err := rls.New(rls.WithDebounce(rls.Options{Enforcer: enf, ConfigDir: dir}, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if want := `level=INFO msg="rate-limit configuration loaded" domains=[a] limits=0 files=1`; !strings.Contains(logs.String(), want) {
		t.Errorf("the start's logs do not say %s:\n%s", want, logs.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Fatal("Reload of an invalid directory returned no error")
	}
	refused := `level=ERROR msg="rate-limit configuration refused; the previous one stays in force"`
	if n := strings.Count(logs.String(), refused); n != 1 || !strings.Contains(logs.String(), "fortnight") {
		t.Errorf("%d refusals logged, want 1 naming the unit fortnight:\n%s", n, logs.String())
	}
}
