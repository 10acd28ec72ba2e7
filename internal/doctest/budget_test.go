package doctest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// librarySize is what the library is made of: every package of the root
// module but cmd/, bench/, examples/, internal/ and the adapters (each a
// module of its own), tests left out.
type librarySize struct {
	topLevel int // exported functions, types, variables and constants
	members  int // exported fields and methods of exported types, interface methods included
	goLines  int // lines of the non-test Go files
	luaLines int // lines of the Lua scripts
}

// The library's budget: at most 150 top-level exported names and 240
// exported methods and fields, and fewer lines than the 14,838 of Go and
// 1,303 of Lua it had before its cut (all Lua at most 800). A library that
// grows past a ceiling says its new work in fewer lines, or moves what
// only its own packages use to internal/.
var libraryCeiling = librarySize{
	topLevel: 150,
	members:  240,
	goLines:  14_838,
	luaLines: 800,
}

func TestLibraryWithinBudget(t *testing.T) {
	got := measureLibrary(t, repoRoot(t))
	for _, f := range []struct {
		what         string
		got, ceiling int
		remedy       string
	}{
		{"top-level exported names", got.topLevel, libraryCeiling.topLevel, "unexport it, or move what only the module's packages use to internal/"},
		{"exported methods and fields", got.members, libraryCeiling.members, "unexport it, or move what only the module's packages use to internal/"},
		{"lines of Go", got.goLines, libraryCeiling.goLines, "say it in fewer lines"},
		{"lines of Lua", got.luaLines, libraryCeiling.luaLines, "say it in fewer lines"},
	} {
		if f.got > f.ceiling {
			t.Errorf("the library has %d %s, more than its ceiling of %d: %s", f.got, f.what, f.ceiling, f.remedy)
		}
	}
	t.Logf("library: %d top-level exported names, %d exported methods and fields, %d lines of Go, %d of Lua", got.topLevel, got.members, got.goLines, got.luaLines)
}

// measureLibrary counts the library under root (see librarySize).
func measureLibrary(t *testing.T, root string) librarySize {
	var size librarySize
	walkDirs(t, root, func(dir, rel string) bool {
		switch first, _, _ := strings.Cut(rel, "/"); first {
		case "cmd", "bench", "examples", "internal", "adapters":
			return false
		}
		if strings.HasSuffix(rel, "/internal") {
			return false
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range entries {
			name := de.Name()
			isGo := strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
			if de.IsDir() || !isGo && !strings.HasSuffix(name, ".lua") {
				continue
			}
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Count(src, []byte("\n"))
			if !isGo {
				size.luaLines += lines
				continue
			}
			size.goLines += lines
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			top, members := exportedNames(f)
			size.topLevel += top
			size.members += members
		}
		return true
	})
	if size.topLevel == 0 || size.goLines == 0 || size.luaLines == 0 {
		t.Fatalf("measured nothing under %s: %+v", root, size)
	}
	return size
}

// exportedNames counts the exported names that f declares: top-level
// ones, and the fields and methods of its exported types (a method
// counts in the file that declares it; an embedded field does not count).
func exportedNames(f *ast.File) (top, members int) {
	exported := func(ids []*ast.Ident) (n int) {
		for _, id := range ids {
			if id.IsExported() {
				n++
			}
		}
		return n
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			switch {
			case !d.Name.IsExported():
			case d.Recv == nil:
				top++
			case ast.IsExported(recvType(d.Recv.List[0].Type)):
				members++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					top += exported(s.Names)
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					top++
					var fields *ast.FieldList
					switch typ := s.Type.(type) {
					case *ast.StructType:
						fields = typ.Fields
					case *ast.InterfaceType:
						fields = typ.Methods
					}
					if fields != nil {
						for _, field := range fields.List {
							members += exported(field.Names)
						}
					}
				}
			}
		}
	}
	return top, members
}
