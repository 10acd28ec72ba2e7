package rls_test

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/rls"
)

// TestSkippedFilesWarned: envoyproxy/ratelimit reads every file of its
// directory, subdirectories included; floodgate reads the *.yaml and
// *.yml files at the top. What it does not read is logged as a warning
// at start and at each reload, and listed by /rlconfig, so a switching
// deployment does not lose limits unseen; so is a quota_mode limit,
// which floodgate enforces as any other, and a replaces naming no limit.
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
	enf := memEnforcer(t)
	var logs syncbuf.Buffer
	srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if want := `level=WARN msg="entries of the configuration directory not read`; strings.Count(logs.String(), want) != 1 ||
		!strings.Contains(logs.String(), "skipped=\"[edge more/ notes.md]\"") {
		t.Errorf("the start's logs do not warn once of edge, more/ and notes.md:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `level=WARN msg="quota_mode is not interpreted`) || !strings.Contains(logs.String(), "limits=[q]") {
		t.Errorf("the start's logs do not warn that a.q's quota_mode is not interpreted:\n%s", logs.String())
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
