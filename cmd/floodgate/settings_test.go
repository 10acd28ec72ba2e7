package main

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// upstreamSettings reads testdata/upstream-settings.tsv: every setting of
// envoyproxy/ratelimit's settings.go at the version scripts/compat.sh
// builds, with its default.
func upstreamSettings(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("testdata/upstream-settings.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, def, _ := strings.Cut(line, "\t")
		settings[name] = def
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(settings) < 100 {
		t.Fatalf("%d settings in testdata/upstream-settings.tsv; the pinned build has 108", len(settings))
	}
	return settings
}

// testsNaming returns, for each string literal of the package's tests
// that is an environment variable's name (or NAME=value), the test
// functions (or helpers) that hold it.
func testsNaming(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	named := map[string][]string{}
	envName := regexp.MustCompile(`^[A-Z][A-Z0-9_]*`)
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "TestEveryUpstreamSettingIsCovered" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if name := envName.FindString(s); name != "" && (name == s || strings.HasPrefix(s[len(name):], "=")) {
					if !slices.Contains(named[name], fn.Name.Name) {
						named[name] = append(named[name], fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	return named
}

// settingsTable reads docs/SERVICE.md's table of envoyproxy/ratelimit's
// settings: each name in the first column (in backquotes, before any
// default in parentheses), with the second column's first word.
func settingsTable(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/SERVICE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "| envoyproxy/ratelimit | floodgate | notes |")
	if !ok {
		t.Fatal("docs/SERVICE.md has no table of envoyproxy/ratelimit's settings")
	}
	status := map[string]string{}
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*)(=[^`]*)?`")
	for _, row := range strings.Split(rest, "\n")[2:] {
		if !strings.HasPrefix(row, "|") {
			break
		}
		cells := strings.Split(row, "|")
		if len(cells) < 4 {
			continue
		}
		word, _, _ := strings.Cut(strings.TrimSpace(cells[2]), " ")
		word = strings.TrimRight(word, ",;:")
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			status[m[1]] = word
		}
	}
	return status
}

// TestEveryUpstreamSettingIsCovered: every setting envoyproxy/ratelimit
// reads is named by a test of this package (one that sets it and sees it
// honoured, or refused), and docs/SERVICE.md's table says "read" of it,
// or "refused" of memcache's alone: no deployment that switches loses a
// setting unseen.
func TestEveryUpstreamSettingIsCovered(t *testing.T) {
	settings := upstreamSettings(t)
	named := testsNaming(t)
	table := settingsTable(t)
	var names []string
	for n := range settings {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		memcache := strings.HasPrefix(n, "MEMCACHE_")
		if len(named[n]) == 0 {
			t.Errorf("%s (upstream's default %q): no test of cmd/floodgate sets it", n, settings[n])
		}
		want := "read"
		if memcache {
			want = "refused"
		}
		switch got, ok := table[n]; {
		case !ok:
			t.Errorf("%s: not in docs/SERVICE.md's table of envoyproxy/ratelimit's settings", n)
		case got != want:
			t.Errorf("%s: docs/SERVICE.md's table says %q, want %q", n, got, want)
		}
		if testing.Verbose() {
			t.Logf("%-46s %-8s %s", n, table[n], strings.Join(named[n], " "))
		}
	}
}

// TestSettingsWithoutEffectAreNoted: upstream's settings that mean
// nothing here (its Redis pools', its directory watching's, its xDS dial
// pause) are accepted and noted, each with why, for the service to log
// once at start; a malformed one is refused.
func TestSettingsWithoutEffectAreNoted(t *testing.T) {
	c, err := parseServe(nil, env(map[string]string{
		"CONFIG_DIR": "x", "REDIS_URL": "r:6379", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "p:6379",
		"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PIPELINE_WINDOW": "150us", "REDIS_PERSECOND_PIPELINE_LIMIT": "8",
		"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"MEMCACHE_MAX_IDLE_CONNS": "2", "MEMCACHE_TLS": "false", // upstream's defaults: nothing asked
	}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range deref(c.notes) {
		if n.Why == "" {
			t.Errorf("%s: noted without a reason", n.Name)
		}
		got = append(got, n.Name+"="+n.Value)
	}
	slices.Sort(got)
	want := []string{"REDIS_PERSECOND_PIPELINE_LIMIT=8", "REDIS_PIPELINE_WINDOW=150us", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false"}
	if !slices.Equal(got, want) {
		t.Errorf("notes %q, want %q", got, want)
	}
	x, err := parseServe(nil, env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3s"}))
	if err != nil {
		t.Fatal(err)
	}
	if ns := deref(x.notes); len(ns) != 1 || ns[0].Name != "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL" || ns[0].Value != "3s" {
		t.Errorf("xDS notes %+v, want CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=3s", ns)
	}
	if _, err := parseServe(nil, env(map[string]string{"CONFIG_DIR": "x", "RUNTIME_WATCH_ROOT": "sometimes"})); err == nil ||
		!strings.Contains(err.Error(), `RUNTIME_WATCH_ROOT: "sometimes" is not true or false`) {
		t.Errorf("a malformed RUNTIME_WATCH_ROOT: %v, want it refused", err)
	}
}

// TestUnsetStatsdIsLogged: upstream sends statsd by default and floodgate
// does not; the start says so when nothing about statsd is set, so that a
// deployment counting on upstream's default sees what to set.
func TestUnsetStatsdIsLogged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const line = "USE_STATSD is unset: no statsd statistics are sent"
	for _, c := range []struct {
		vars map[string]string
		want bool
	}{
		{map[string]string{}, true},
		{map[string]string{"USE_STATSD": "false"}, false},
		{map[string]string{"DISABLE_STATS": "true"}, false},
	} {
		c.vars["CONFIG_DIR"] = dir
		r := startServe(t, c.vars)
		if got := strings.Contains(r.logs.String(), line); got != c.want {
			t.Errorf("%v: logged %q: %v, want %v", c.vars, line, got, c.want)
		}
	}
}
