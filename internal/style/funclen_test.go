package style

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxFuncLines is the longest a function body may be, braces included.
const maxFuncLines = 80

// longFuncs are the functions allowed to be longer, by file (from the
// module's root) and name, each with the reason.
var longFuncs = map[string]string{
	"internal/sandbox/init_linux.go start": "the sandbox's linear setup: one step after another, in the order the kernel needs",
}

// TestNoLongFunctions fails for a function (or function literal) of
// non-test code whose body exceeds maxFuncLines lines, unless longFuncs
// names it, and for an entry of longFuncs that is no longer needed.
func TestNoLongFunctions(t *testing.T) {
	used := map[string]bool{}
	var long []string
	eachFile(t, func(fset *token.FileSet, rel string, f *ast.File) {
		for name, lines := range funcLengths(fset, f) {
			if lines <= maxFuncLines {
				continue
			}
			key := rel + " " + name
			if _, ok := longFuncs[key]; ok {
				used[key] = true
				continue
			}
			long = append(long, key)
		}
	})
	assert.Empty(t, long, "functions over %d lines: split them into named steps", maxFuncLines)
	for key := range longFuncs {
		assert.True(t, used[key], "%s is no longer over %d lines: remove it from longFuncs", key, maxFuncLines)
	}
}

// eachFile parses every non-test Go file of the module and hands it to fn
// with its slash-separated path from the module's root.
func eachFile(t *testing.T, fn func(fset *token.FileSet, rel string, f *ast.File)) {
	t.Helper()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(fset, filepath.ToSlash(rel), f)
		return nil
	})
	require.NoError(t, err)
}

// funcLengths gives the length of every function body of f in lines, by
// name; a function literal counts under the name of the function holding
// it (or "var" outside any), and the longest body of a name is kept.
func funcLengths(fset *token.FileSet, f *ast.File) map[string]int {
	out := map[string]int{}
	for _, decl := range f.Decls {
		name := "var"
		if fd, ok := decl.(*ast.FuncDecl); ok {
			name = fd.Name.Name
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			var body *ast.BlockStmt
			switch fn := n.(type) {
			case *ast.FuncDecl:
				body = fn.Body
			case *ast.FuncLit:
				body = fn.Body
			}
			if body != nil {
				lines := fset.Position(body.Rbrace).Line - fset.Position(body.Lbrace).Line + 1
				out[name] = max(out[name], lines)
			}
			return true
		})
	}
	return out
}

// skipDir reports whether a directory holds no code of the module.
func skipDir(name string) bool {
	return name == "testdata" || name == "bin" || name == "vendor" || strings.HasPrefix(name, ".")
}

// moduleRoot is the directory of go.mod, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}
