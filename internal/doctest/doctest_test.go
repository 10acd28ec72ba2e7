// Package doctest checks that the documentation (README.md, CHANGELOG.md
// and docs/*.md) says what the code does:
//
//   - Every ```go block compiles against the module as it is. A block that
//     is a whole file (package main) is built as it is; a block of
//     declarations (a func TestX, say) becomes a file of its own package; any
//     other block is the body of a function. The imports are the packages
//     the block names (floodgate, httplimit, redis, prometheus, time, ...).
//     The names a block assumes (a limiter, a ctx) are package-level
//     variables given in an HTML comment right before the block, which
//     Markdown does not show:
//
//     <!-- go: var limiter *floodgate.Limiter; var ctx context.Context -->
//
//     Every variable a block declares at its top level is then used, so
//     that a block need not use all it shows.
//
//   - Every ```yaml block parses: one with a top-level domain is an
//     envoyproxy/ratelimit configuration and must pass rlconfig.Parse;
//     the others (Kubernetes objects, Envoy and Prometheus configuration)
//     must be YAML, and a Kubernetes object must have apiVersion and kind.
//
//   - Code in prose is checked too. In every `inline code` span, each
//     pkg.Name or pkg.Type.Member of one of the workspace's packages
//     (floodgate's, and the internal and bank ones that docs/ describe)
//     must exist; a Type.Member without its package must be a member of
//     some type of that name (Options.Timeout); a test named alone
//     (TestChaos) must be a test, benchmark, fuzz target or example of the
//     repository. A span that is a whole call or composite literal of floodgate's API
//     (`floodgate.ParseLimit("pix", "10/1m", floodgate.SlidingWindow)`) is
//     compiled when every name it uses is a literal, a package or one of
//     proseVars; a bare call of a function that one of floodgate's packages
//     exports (`ParseLimit("10/1m")`) is compiled as that package's.
//
//   - Every relative link goes to a file that exists, and every #anchor to
//     a heading of its page.
//
//   - Every doc link of the Go sources ([Name], [pkg.Type.Member]) to one
//     of floodgate's exported names names one that exists
//     (doclinks_test.go).
//
// The blocks are compiled with one go vet of generated packages in a
// directory under this one (testdata/gen-*, removed afterwards), so that
// they resolve the workspace's modules (go.work) as the code does. Line
// directives make each error name the Markdown file and line.
package doctest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/rlconfig"
)

const module = "github.com/floodgate-rl/floodgate"

// maxReadmeWords is the README's budget (a map, not a manual),
// counted as wc -w counts.
const maxReadmeWords = 2500

// otherPackages are the packages other than floodgate's that blocks and
// prose may name, by the name they are used under.
var otherPackages = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"httptest":   "net/http/httptest",
	"log":        "log",
	"os":         "os",
	"signal":     "os/signal",
	"slog":       "log/slog",
	"strings":    "strings",
	"testing":    "testing",
	"time":       "time",
	"redis":      "github.com/redis/go-redis/v9",
	"rueidis":    "github.com/redis/rueidis",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"grpc":       "google.golang.org/grpc",
	"codes":      "google.golang.org/grpc/codes",
	"status":     "google.golang.org/grpc/status",
	"gin":        "github.com/gin-gonic/gin",
	"chi":        "github.com/go-chi/chi/v5",
}

// proseVars are the names that code in prose may use without declaring
// them.
var proseVars = map[string]string{
	"ctx":      "context.Context",
	"limiter":  "*floodgate.Limiter",
	"store":    "floodgate.Store",
	"rule":     "floodgate.Rule",
	"d":        "floodgate.Decision",
	"rdb":      "*redis.Client",
	"logger":   "*slog.Logger",
	"reg":      "prometheus.Registerer",
	"resolver": "*clientip.Resolver",
	"e":        "*enforce.Enforcer",
	"hl":       "*httplimit.Routes",
	"mw":       "func(http.Handler) http.Handler",
	"watcher":  "*rlconfig.Watcher",

	"redisOverrides": "*overrides.Table",
}

func TestDocs(t *testing.T) {
	root := repoRoot(t)
	pkgs, all := libraryPackages(t, root)
	imports := map[string]string{}
	for name, p := range pkgs {
		imports[name] = p.path
	}
	for name, path := range otherPackages {
		imports[name] = path
	}

	var gen generator
	gen.imports = imports
	gen.pkgs = pkgs
	gen.all = all
	gen.tests = testNames(t, root)
	for _, doc := range docFiles(t, root) {
		gen.file(t, root, doc)
	}
	if gen.goBlocks == 0 || gen.yamlBlocks == 0 || gen.compiledProse == 0 {
		t.Fatalf("found %d Go blocks, %d YAML blocks and %d compiled prose calls: the Markdown scanner is broken",
			gen.goBlocks, gen.yamlBlocks, gen.compiledProse)
	}
	t.Logf("%d Go blocks, %d YAML blocks, %d mentions of the API, %d of them compiled", gen.goBlocks, gen.yamlBlocks, gen.mentions, gen.compiledProse)
	gen.compile(t, root)
}

// TestReadmeIsAMap holds the README to the shape: the two commands
// near the top and a bounded length.
func TestReadmeIsAMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n > maxReadmeWords {
		t.Errorf("README.md has %d words, more than %d: move the details to the package doc or docs/ page that owns them, and link", n, maxReadmeWords)
	}
	head := string(b)
	if i := strings.Index(head, "\n## Install"); i >= 0 {
		head = head[:i]
	} else {
		t.Error(`README.md has no "## Install" section`)
	}
	for _, cmd := range []string{"go run ./examples/bank/cmd/demo", "scripts/test.sh"} {
		if !strings.Contains(head, cmd) {
			t.Errorf("README.md does not name %q before Install", cmd)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.HasPrefix(b, []byte("module "+module+"\n")) {
		t.Fatalf("%s is not the module's root (%v)", dir, err)
	}
	return dir
}

func docFiles(t *testing.T, root string) []string {
	files := []string{filepath.Join(root, "README.md")}
	if _, err := os.Stat(filepath.Join(root, "CHANGELOG.md")); err == nil {
		files = append(files, filepath.Join(root, "CHANGELOG.md"))
	}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, more...)
}

// A pkg is one of floodgate's library packages, indexed from its sources.
type pkg struct {
	path    string
	names   map[string]bool            // exported top-level names
	funcs   map[string]bool            // top-level functions
	members map[string]map[string]bool // type: fields and methods
	embeds  map[string][]string        // type: embedded types, as written
	aliases map[string]string          // type: the type it aliases, as written
}

// libraryPackages indexes every package a user imports: the module's,
// and the gin adapter's, but for internal, cmd, examples and bench.
//
// It also returns every package of the workspace but commands and the
// benchmarks' (internal ones and the bank's included), by name, for the
// mentions of prose: a name two of them share is merged.
func libraryPackages(t *testing.T, root string) (lib, all map[string]*pkg) {
	lib, all = map[string]*pkg{}, map[string]*pkg{}
	walkDirs(t, root, func(path, rel string) bool {
		if rel == "bench" {
			return false
		}
		name, p := indexPackage(t, path)
		if p == nil {
			return true
		}
		p.path = importPath(rel)
		if q := all[name]; q != nil {
			q.merge(p)
		} else {
			all[name] = p
		}
		if rel != "internal" && !strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "examples/") &&
			!strings.HasPrefix(rel, "cmd/") {
			lib[name] = p
		}
		return true
	})
	if len(lib) < 10 || lib["floodgate"] == nil || lib["httplimit"] == nil || all["bank"] == nil {
		t.Fatalf("indexed only %d packages", len(lib))
	}
	return lib, all
}

// walkDirs calls fn with every directory of the repository that may hold
// a package (path, and rel: the path relative to root, "." for root
// itself), but hidden ones, testdata, deploy and scripts; fn returns false
// to skip a directory and what it holds.
func walkDirs(t *testing.T, root string, fn func(path, rel string) bool) {
	err := filepath.WalkDir(root, func(path string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if (strings.HasPrefix(de.Name(), ".") && rel != ".") || de.Name() == "testdata" || rel == "deploy" || rel == "scripts" || !fn(path, rel) {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// importPath returns the import path of the directory rel of the
// repository.
func importPath(rel string) string {
	if rel == "." {
		return module
	}
	return module + "/" + rel
}

// merge adds q's names to p's, for two packages of one name.
func (p *pkg) merge(q *pkg) {
	for n := range q.names {
		p.names[n] = true
	}
	for n := range q.funcs {
		p.funcs[n] = true
	}
	for typ, ms := range q.members {
		for m := range ms {
			p.member(typ, m)
		}
	}
	for typ, es := range q.embeds {
		p.embeds[typ] = append(p.embeds[typ], es...)
	}
	for typ, a := range q.aliases {
		p.aliases[typ] = a
	}
}

// testNames returns the name of every test, benchmark, fuzz target and
// example in the repository, commands and benchmarks included.
func testNames(t *testing.T, root string) map[string]bool {
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if (strings.HasPrefix(de.Name(), ".") && path != root) || de.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && isTestName(fd.Name.Name) {
				names[fd.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// indexPackage indexes the package in dir, if it has one and it is not a
// command.
func indexPackage(t *testing.T, dir string) (string, *pkg) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	p := &pkg{names: map[string]bool{}, funcs: map[string]bool{}, members: map[string]map[string]bool{},
		embeds: map[string][]string{}, aliases: map[string]string{}}
	name := ""
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(file, "_test.go") {
			// Tests, benchmarks and examples are named in prose
			// (rls.TestRedisOutage) as much as the API.
			for _, decl := range f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && isTestName(fd.Name.Name) {
					p.names[fd.Name.Name] = true
				}
			}
			continue
		}
		if f.Name.Name == "main" {
			return "", nil
		}
		name = f.Name.Name
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					p.names[decl.Name.Name] = true
					p.funcs[decl.Name.Name] = true
					continue
				}
				p.member(recvType(decl.Recv.List[0].Type), decl.Name.Name)
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							p.names[n.Name] = true
						}
					case *ast.TypeSpec:
						p.indexType(spec)
					}
				}
			}
		}
	}
	if name == "" {
		return "", nil
	}
	return name, p
}

func isTestName(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func (p *pkg) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

func (p *pkg) indexType(spec *ast.TypeSpec) {
	typ := spec.Name.Name
	p.names[typ] = true
	if spec.Assign.IsValid() {
		p.aliases[typ] = exprString(spec.Type)
		return
	}
	var fields *ast.FieldList
	switch x := spec.Type.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default:
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			embedded := exprString(f.Type)
			embedded = strings.TrimPrefix(embedded, "*")
			p.embeds[typ] = append(p.embeds[typ], embedded)
			p.member(typ, embedded[strings.LastIndex(embedded, ".")+1:])
			continue
		}
		for _, n := range f.Names {
			p.member(typ, n.Name)
		}
	}
}

func exprString(e ast.Expr) string {
	var b bytes.Buffer
	printer.Fprint(&b, token.NewFileSet(), e)
	return b.String()
}

// has reports whether pkg.name, or pkg.name.member when member is not
// empty, exists.
func has(pkgs map[string]*pkg, pkgName, name, member string) bool {
	p := pkgs[pkgName]
	if p == nil || !p.names[name] {
		return false
	}
	if member == "" {
		return true
	}
	return p.hasMember(pkgs, pkgName, name, member, 0)
}

func (p *pkg) hasMember(pkgs map[string]*pkg, pkgName, typ, member string, depth int) bool {
	if depth > 5 {
		return false
	}
	if p.members[typ][member] {
		return true
	}
	if alias, ok := p.aliases[typ]; ok {
		return resolve(pkgs, pkgName, alias, member, depth)
	}
	for _, e := range p.embeds[typ] {
		if resolve(pkgs, pkgName, e, member, depth) {
			return true
		}
	}
	if _, isType := p.members[typ]; !isType && len(p.embeds[typ]) == 0 && !p.funcs[typ] {
		// A variable or constant (or a type with neither fields nor
		// methods): its members are not in the index.
		return !isTypeName(p, typ)
	}
	return false
}

func isTypeName(p *pkg, name string) bool {
	_, ok := p.members[name]
	_, alias := p.aliases[name]
	return ok || alias
}

// resolve looks member up in the type written as typ in package pkgName.
// A type of a package that is not floodgate's is taken on trust.
func resolve(pkgs map[string]*pkg, pkgName, typ, member string, depth int) bool {
	if i := strings.Index(typ, "."); i >= 0 {
		pkgName, typ = typ[:i], typ[i+1:]
	}
	p := pkgs[pkgName]
	if p == nil {
		return true
	}
	return p.hasMember(pkgs, pkgName, typ, member, depth+1)
}

// A generator turns the documentation into Go packages to compile.
type generator struct {
	imports map[string]string
	pkgs    map[string]*pkg // floodgate's library, which generated code may import
	all     map[string]*pkg // every package prose may name
	tests   map[string]bool // every test, benchmark, fuzz target and example
	units   []unit          // one package each

	goBlocks, yamlBlocks, mentions, compiledProse int
}

type unit struct {
	name string
	src  []byte
}

type block struct {
	doc      string // the Markdown file
	line     int    // the first line of the block's contents
	lang     string
	preamble string // from <!-- go: ... -->
	text     string
}

func (g *generator) file(t *testing.T, root, doc string) {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, doc)
	lines := strings.Split(string(b), "\n")
	var prose []proseSpan
	// A code span may run over lines, but not out of its paragraph (or
	// table row, or heading).
	paraStart, paraEnd := 0, 0
	flush := func() {
		text := strings.Join(lines[paraStart:paraEnd], "\n")
		for _, sp := range codeSpans(text) {
			line := paraStart + 1 + strings.Count(text[:sp.at], "\n")
			prose = append(prose, proseSpan{line: line, text: strings.ReplaceAll(sp.text, "\n", " ")})
		}
		paraStart = paraEnd
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "<!--") ||
			strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "|") {
			flush()
			paraStart = i
		}
		if strings.HasPrefix(trimmed, "```") {
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			start := i + 1
			j := start
			for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
				j++
			}
			if j == len(lines) {
				t.Errorf("%s:%d: a code block that never ends", rel, i+1)
				return
			}
			blk := block{doc: doc, line: start + 1, lang: lang, text: strings.Join(lines[start:j], "\n"),
				preamble: preamble(lines, i)}
			switch lang {
			case "go":
				g.goBlocks++
				g.goBlock(t, rel, blk, len(g.units))
			case "yaml", "yml":
				g.yamlBlocks++
				checkYAML(t, rel, blk)
			}
			i = j
			paraStart, paraEnd = j+1, j+1
			continue
		}
		if strings.HasPrefix(trimmed, "<!--") {
			for !strings.Contains(lines[i], "-->") && i+1 < len(lines) {
				i++
			}
			paraStart, paraEnd = i+1, i+1
			continue
		}
		paraEnd = i + 1
		if strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "|") {
			flush()
		}
		checkLinks(t, root, doc, rel, i+1, line)
	}
	paraEnd = len(lines)
	flush()
	g.prose(t, rel, doc, prose)
}

// preamble returns the Go declarations of a <!-- go: ... --> comment that
// ends on the line before the fence at lines[fence], or "".
func preamble(lines []string, fence int) string {
	end := fence - 1
	if end < 0 || !strings.HasSuffix(strings.TrimSpace(lines[end]), "-->") {
		return ""
	}
	start := end
	for start >= 0 && !strings.HasPrefix(strings.TrimSpace(lines[start]), "<!--") {
		start--
	}
	if start < 0 {
		return ""
	}
	text := strings.TrimSpace(strings.Join(lines[start:end+1], "\n"))
	text = strings.TrimSuffix(strings.TrimPrefix(text, "<!--"), "-->")
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "go:") {
		return ""
	}
	return strings.ReplaceAll(strings.TrimSpace(strings.TrimPrefix(text, "go:")), "; ", "\n")
}

var packageClause = regexp.MustCompile(`(?m)^package \w+`)

func (g *generator) goBlock(t *testing.T, rel string, blk block, n int) {
	name := fmt.Sprintf("b%03d", n)
	lineDirective := fmt.Sprintf("//line %s:%d\n", blk.doc, blk.line)
	if packageClause.MatchString(blk.text) {
		if blk.preamble != "" {
			t.Errorf("%s:%d: a whole file takes no <!-- go: --> preamble", rel, blk.line)
		}
		g.units = append(g.units, unit{name, []byte(lineDirective + blk.text + "\n")})
		return
	}
	pre := ""
	if blk.preamble != "" {
		pre = fmt.Sprintf("//line %s:%d\n%s\n", blk.doc, blk.line-1, blk.preamble)
	}
	// Declarations, or statements?
	fset := token.NewFileSet()
	declSrc := "package " + name + "\n" + pre + lineDirective + blk.text + "\n"
	if f, err := parser.ParseFile(fset, "", declSrc, 0); err == nil {
		g.units = append(g.units, unit{name, g.withImports(f, declSrc)})
		return
	}
	stmtSrc := "package " + name + "\n" + pre + "func _() {\n" + lineDirective + blk.text + "\n}\n"
	f, err := parser.ParseFile(fset, "", stmtSrc, 0)
	if err != nil {
		t.Errorf("%s: not Go: %v", rel, err)
		return
	}
	// Use every variable the block declares at its top level.
	body := f.Decls[len(f.Decls)-1].(*ast.FuncDecl).Body
	var uses []string
	for _, st := range body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
						uses = append(uses, "_ = "+id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, spec := range gd.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.Name != "_" {
							uses = append(uses, "_ = "+id.Name)
						}
					}
				}
			}
		}
	}
	src := "package " + name + "\n" + pre + "func _() {\n" + lineDirective + blk.text + "\n" +
		fmt.Sprintf("//line %s:%d\n", blk.doc, blk.line-1) + strings.Join(uses, "\n") + "\n}\n"
	g.units = append(g.units, unit{name, g.withImports(f, src)})
}

// withImports adds to src (a file whose package clause is its first line)
// an import of each package that f names but does not declare.
func (g *generator) withImports(f *ast.File, src string) []byte {
	seen := map[string]bool{}
	var paths []string
	for _, id := range f.Unresolved {
		if path, ok := g.imports[id.Name]; ok && !seen[id.Name] {
			seen[id.Name] = true
			paths = append(paths, fmt.Sprintf("%s %q", id.Name, path))
		}
	}
	sort.Strings(paths)
	clause, rest, _ := strings.Cut(src, "\n")
	if len(paths) == 0 {
		return []byte(src)
	}
	return []byte(clause + "\n\nimport (\n\t" + strings.Join(paths, "\n\t") + "\n)\n\n" + rest)
}

type proseSpan struct {
	line int
	text string
}

type span struct {
	at   int // offset in the text
	text string
}

// codeSpans returns the `code spans` of text.
func codeSpans(text string) []span {
	var spans []span
	off := 0
	for {
		i := strings.IndexByte(text[off:], '`')
		if i < 0 {
			return spans
		}
		i += off
		n := 1
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		fence := text[i : i+n]
		j := strings.Index(text[i+n:], fence)
		if j < 0 {
			return spans
		}
		spans = append(spans, span{i, strings.TrimSpace(text[i+n : i+n+j])})
		off = i + n + j + n
	}
}

var (
	mention     = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	testMention = regexp.MustCompile(`^((?:Test|Benchmark|Fuzz|Example)[A-Z_]\w*)(?:/\S*)?$`)
	typeMention = regexp.MustCompile(`(?:^|[^\w.])([A-Z]\w*)\.([A-Z]\w*)\b`)
)

// prose checks the code spans of one file: each mention of the API
// exists, and whole calls compile.
func (g *generator) prose(t *testing.T, rel, doc string, spans []proseSpan) {
	name := fmt.Sprintf("p%03d", len(g.units))
	var body strings.Builder
	for _, s := range spans {
		for _, m := range mention.FindAllStringSubmatch(s.text, -1) {
			if g.all[m[1]] == nil {
				continue
			}
			g.mentions++
			if !has(g.all, m[1], m[2], m[3]) {
				t.Errorf("%s:%d: `%s`: %s has no %s", rel, s.line, s.text, m[1], strings.TrimSuffix(m[2]+"."+m[3], "."))
			}
		}
		// A test named alone (`TestChaos`, `BenchmarkCluster/one-key`).
		if m := testMention.FindStringSubmatch(s.text); m != nil {
			g.mentions++
			if !g.tests[m[1]] {
				t.Errorf("%s:%d: `%s`: no such test, benchmark, fuzz target or example", rel, s.line, s.text)
			}
		}
		// Type.Member without its package: some package's type of that
		// name must have it (Options.Timeout, Decision.Each).
		for _, m := range typeMention.FindAllStringSubmatch(s.text, -1) {
			typ, found, isType := m[1], false, false
			for name, p := range g.all {
				if isTypeName(p, typ) {
					isType = true
					found = found || p.hasMember(g.all, name, typ, m[2], 0)
				}
			}
			if isType {
				g.mentions++
				if !found {
					t.Errorf("%s:%d: `%s`: no type %s of floodgate's has %s", rel, s.line, s.text, typ, m[2])
				}
			}
		}
		if stmt, ok := g.proseStatement(s.text); ok {
			g.compiledProse++
			if testing.Verbose() {
				t.Logf("%s:%d: compiling `%s`", rel, s.line, s.text)
			}
			fmt.Fprintf(&body, "//line %s:%d\n%s\n", doc, s.line, stmt)
		}
	}
	if body.Len() == 0 {
		return
	}
	var vars []string
	for v, typ := range proseVars {
		vars = append(vars, fmt.Sprintf("\t%s %s", v, typ))
	}
	sort.Strings(vars)
	src := "package " + name + "\nvar (\n" + strings.Join(vars, "\n") + "\n)\n\nfunc _() {\n" + body.String() + "}\n"
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		t.Errorf("%s: prose: %v", rel, err)
		return
	}
	g.units = append(g.units, unit{name, g.withImports(f, src)})
}

// proseStatement returns a statement that compiles the code span s if s is
// a call or composite literal of floodgate's API whose every name is a
// literal, a package or one of proseVars.
func (g *generator) proseStatement(s string) (string, bool) {
	e, err := parser.ParseExpr(s)
	if err != nil {
		return "", false
	}
	var root ast.Expr
	switch x := e.(type) {
	case *ast.CallExpr:
		root = x.Fun
	case *ast.CompositeLit:
		root = x.Type
	default:
		return "", false
	}
	for {
		if sel, ok := root.(*ast.SelectorExpr); ok {
			root = sel.X
			continue
		}
		if call, ok := root.(*ast.CallExpr); ok {
			root = call.Fun
			continue
		}
		break
	}
	id, ok := root.(*ast.Ident)
	if !ok {
		return "", false
	}
	if g.pkgs[id.Name] == nil {
		// A bare call of an exported function, with literal arguments
		// (`ParseLimit("10/1m")`): whose is it? A method's call reads the
		// same, so calls with other arguments, or none, are left alone.
		call, isCall := e.(*ast.CallExpr)
		if !isCall || call.Fun != root || !unicode.IsUpper(rune(id.Name[0])) || len(call.Args) == 0 {
			return "", false
		}
		for _, a := range call.Args {
			if _, lit := a.(*ast.BasicLit); !lit {
				return "", false
			}
		}
		owner := ""
		for name, p := range g.pkgs {
			if p.funcs[id.Name] {
				if owner != "" {
					return "", false // ambiguous
				}
				owner = name
			}
		}
		if owner == "" {
			return "", false
		}
		s = owner + "." + s
		if e, err = parser.ParseExpr(s); err != nil {
			return "", false
		}
	}
	if !g.closed(e) {
		return "", false
	}
	if _, isCall := e.(*ast.CallExpr); isCall {
		return s, true
	}
	return "_ = " + s, true
}

// closed reports whether every free name of e is a package, a predeclared
// name or one of proseVars.
func (g *generator) closed(e ast.Expr) bool {
	ok := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			ast.Inspect(x.X, func(n ast.Node) bool {
				if id, isID := n.(*ast.Ident); isID && !g.known(id.Name) {
					ok = false
				}
				return ok
			})
			return false
		case *ast.KeyValueExpr:
			if _, isID := x.Key.(*ast.Ident); !isID {
				ast.Inspect(x.Key, func(n ast.Node) bool { return g.inspect(n, &ok) })
			}
			ast.Inspect(x.Value, func(n ast.Node) bool { return g.inspect(n, &ok) })
			return false
		case *ast.FuncLit:
			ok = false
		case *ast.Ident:
			if !g.known(x.Name) {
				ok = false
			}
		}
		return ok
	})
	return ok
}

func (g *generator) inspect(n ast.Node, ok *bool) bool {
	if !*ok {
		return false
	}
	sub := true
	if e, isExpr := n.(ast.Expr); isExpr {
		sub = g.closed(e)
		if !sub {
			*ok = false
		}
		return false
	}
	return true
}

func (g *generator) known(name string) bool {
	if _, ok := g.imports[name]; ok {
		return true
	}
	if _, ok := proseVars[name]; ok {
		return true
	}
	switch name {
	case "nil", "true", "false", "string", "int", "int64", "byte", "error", "any", "len", "make":
		return true
	}
	return false
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// checkLinks checks the line's relative links: the file exists, and an
// anchor names a heading of it.
func checkLinks(t *testing.T, root, doc, rel string, line int, text string) {
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		path := doc
		if file != "" {
			path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(file))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s:%d: link to %s: %v", rel, line, target, err)
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(path, ".md") {
			continue
		}
		if !anchors(t, path)[anchor] {
			t.Errorf("%s:%d: link to %s: no heading has the anchor #%s", rel, line, target, anchor)
		}
	}
}

// anchors returns the anchors of a Markdown file's headings, as GitHub
// makes them.
func anchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				a.WriteRune(r)
			case r == ' ':
				a.WriteByte('-')
			}
		}
		set[a.String()] = true
	}
	return set
}

// checkYAML parses a yaml block.
func checkYAML(t *testing.T, rel string, blk block) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(blk.text), &doc); err != nil {
		t.Errorf("%s:%d: YAML: %v", rel, blk.line, err)
		return
	}
	if _, ok := doc["domain"]; ok {
		if _, err := rlconfig.Parse(map[string][]byte{"doc.yaml": []byte(blk.text)}, rlconfig.Options{}); err != nil {
			t.Errorf("%s:%d: rlconfig: %v", rel, blk.line, err)
		}
		return
	}
	_, api := doc["apiVersion"]
	_, kind := doc["kind"]
	if api != kind {
		t.Errorf("%s:%d: a Kubernetes object needs both apiVersion and kind", rel, blk.line)
	}
}

// compile writes every unit as a package under testdata and vets them
// all at once.
func (g *generator) compile(t *testing.T, root string) {
	parent := filepath.Join(root, "internal", "doctest", "testdata")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove(parent) // only if empty: another run may share it
	})
	var args []string
	args = append(args, "vet")
	for _, u := range g.units {
		d := filepath.Join(dir, u.name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "doc.go"), u.src, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "./"+filepath.ToSlash(mustRel(t, root, d)))
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("the documentation's Go does not compile (go vet: %v):\n%s", err, out)
		if testing.Verbose() {
			for _, u := range g.units {
				t.Logf("%s:\n%s", u.name, u.src)
			}
		}
	}
}

func mustRel(t *testing.T, base, path string) string {
	rel, err := filepath.Rel(base, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
