package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docTestName is a test docs/threat-model.md cites: `TestX`, `pkg/TestX`
// or `pkg/TestX*` (every test whose name starts so).
var docTestName = regexp.MustCompile("`((?:[a-z0-9_]+/)*)(Test[A-Za-z0-9_]+)(\\*?)`")

// testFuncs lists the test functions of the _test.go files in dir, or
// below it with deep.
func testFuncs(t *testing.T, dir string, deep bool) []string {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (!deep || strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestThreatModelCitesExistingTests: every test docs/threat-model.md
// gives as the proof of a guarantee exists, in the package it names (a
// name without a package anywhere in the repository): a test renamed or
// moved must take its row along.
func TestThreatModelCitesExistingTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "threat-model.md"))
	require.NoError(t, err)
	all := testFuncs(t, root, true)
	cited := docTestName.FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, cited)
	for _, m := range cited {
		pkg, name, prefix := strings.TrimSuffix(m[1], "/"), m[2], m[3] == "*"
		funcs := all
		if pkg != "" {
			if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
				t.Errorf("%s: no package %s", m[0], pkg)
				continue
			}
			funcs = testFuncs(t, filepath.Join(root, pkg), false)
		}
		found := false
		for _, f := range funcs {
			if f == name || prefix && strings.HasPrefix(f, name) {
				found = true
				break
			}
		}
		assert.True(t, found, "%s is cited by docs/threat-model.md but no such test exists", m[0])
	}
}
