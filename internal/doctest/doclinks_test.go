package doctest

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDocLinks checks the doc links of the Go sources: every [Name],
// [Type.Member], [pkg.Name] or [pkg.Type.Member] in a comment of a
// workspace package (commands, examples and internal packages included)
// that names an exported identifier of one of floodgate's packages must
// name one that exists. go doc renders a link to a name that is gone as
// plain text, without a word, so a doc that links a removed or moved name
// reads as if it were there. Names of other modules and of the standard
// library are taken on trust.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	byPath := map[string]*pkg{} // floodgate's packages, by import path
	dirs := map[string]string{} // directory: import path
	walkDirs(t, root, func(p, rel string) bool {
		if _, q := indexPackage(t, p); q != nil || hasGo(p) {
			if q != nil {
				byPath[importPath(rel)] = q
			}
			dirs[p] = importPath(rel)
		}
		return true
	})
	byName := byPath2name(byPath)
	links, checked := 0, 0
	for dir, ip := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			imports := map[string]string{f.Name.Name: ip}
			for _, spec := range f.Imports {
				p, _ := strconv.Unquote(spec.Path.Value)
				name := path.Base(p)
				if spec.Name != nil {
					name = spec.Name.Name
				}
				imports[name] = p
			}
			p := &comment.Parser{
				LookupPackage: func(name string) (string, bool) {
					p, ok := imports[name]
					return p, ok
				},
				// Every name is a link, so that a link to a name that does
				// not exist is one too, and is checked below.
				LookupSym: func(recv, name string) bool { return true },
			}
			rel, _ := filepath.Rel(root, file)
			for _, cg := range f.Comments {
				for _, l := range docLinks(p.Parse(cg.Text())) {
					links++
					target := l.ImportPath
					if target == "" {
						target = ip
					}
					q := byPath[target]
					if q == nil || !token.IsExported(l.Name) || (l.Recv != "" && !token.IsExported(l.Recv)) {
						continue // another module's, or an unexported name
					}
					checked++
					typ, member := l.Recv, l.Name
					if typ == "" {
						typ, member = l.Name, ""
					}
					if !q.names[typ] || (member != "" && !q.hasMember(byName, path.Base(target), typ, member, 0)) {
						t.Errorf("%s:%d: doc link [%s] names nothing in %s", rel, fset.Position(linkPos(cg, l)).Line, linkText(l), target)
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d of %d doc links: the scanner is broken", checked, links)
	}
	t.Logf("%d doc links, %d of them to floodgate's exported names, checked", links, checked)
}

// hasGo reports whether dir holds a Go file (a command's, say, which
// indexPackage skips).
func hasGo(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(files) > 0
}

// byPath2name indexes the packages by name, as hasMember resolves the
// types that a type embeds.
func byPath2name(byPath map[string]*pkg) map[string]*pkg {
	m := map[string]*pkg{}
	for ip, p := range byPath {
		m[path.Base(ip)] = p
	}
	return m
}

// docLinks returns the doc links of d.
func docLinks(d *comment.Doc) []*comment.DocLink {
	var out []*comment.DocLink
	var text func([]comment.Text)
	text = func(ts []comment.Text) {
		for _, x := range ts {
			switch x := x.(type) {
			case *comment.DocLink:
				out = append(out, x)
			case *comment.Link:
				text(x.Text)
			case comment.Italic, comment.Plain:
			}
		}
	}
	for _, b := range d.Content {
		switch b := b.(type) {
		case *comment.Paragraph:
			text(b.Text)
		case *comment.Heading:
			text(b.Text)
		case *comment.List:
			for _, it := range b.Items {
				for _, c := range it.Content {
					if p, ok := c.(*comment.Paragraph); ok {
						text(p.Text)
					}
				}
			}
		}
	}
	return out
}

// linkPos returns the position of the comment line that holds l, or of
// the comment if none holds it as written.
func linkPos(cg *ast.CommentGroup, l *comment.DocLink) token.Pos {
	for _, c := range cg.List {
		if strings.Contains(c.Text, "["+l.Name+"]") || strings.Contains(c.Text, "."+l.Name+"]") {
			return c.Pos()
		}
	}
	return cg.Pos()
}

func linkText(l *comment.DocLink) string {
	s := l.Name
	if l.Recv != "" {
		s = l.Recv + "." + s
	}
	if l.ImportPath != "" {
		s = path.Base(l.ImportPath) + "." + s
	}
	return s
}
