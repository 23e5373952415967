package style

import (
	"fmt"
	"go/ast"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
)

// vocabulary are the names under which acpfs keeps the values of a
// declared vocabulary (ledger.Kind and ledger.Op, protocol rules, events
// and phases, note types): a field or a function of one of these names.
var vocabulary = map[string]bool{
	"Kind": true, "KindOf": true, "Op": true, "Rule": true, "RuleOf": true,
	"Event": true, "Phase": true, "Type": true,
}

// TestNoVocabularyLiterals fails where non-test code compares a value of
// the vocabulary (x.Kind, protocol.RuleOf(err), ...) with a string
// literal, in == or != or as a switch case: the declared constant is the
// one spelling, so that renaming or retyping it reaches every use. The
// empty string (unset) is allowed.
func TestNoVocabularyLiterals(t *testing.T) {
	var found []string
	eachFile(t, func(fset *token.FileSet, rel string, f *ast.File) {
		at := func(n ast.Node) string {
			p := fset.Position(n.Pos())
			return fmt.Sprintf("%s:%d", rel, p.Line)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BinaryExpr:
				if x.Op != token.EQL && x.Op != token.NEQ {
					break
				}
				if (literal(x.X) && ofVocabulary(x.Y)) || (literal(x.Y) && ofVocabulary(x.X)) {
					found = append(found, at(x))
				}
			case *ast.SwitchStmt:
				if x.Tag == nil || !ofVocabulary(x.Tag) {
					break
				}
				for _, c := range x.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						if literal(e) {
							found = append(found, at(e))
						}
					}
				}
			}
			return true
		})
	})
	assert.Empty(t, found, "compare with the declared constant, not a string literal")
}

// literal reports a non-empty string literal.
func literal(e ast.Expr) bool {
	b, ok := e.(*ast.BasicLit)
	return ok && b.Kind == token.STRING && b.Value != `""` && b.Value != "``"
}

// ofVocabulary reports an expression that names a vocabulary value: a
// selector (r.Kind) or a call (protocol.RuleOf(err)) of one of its names.
func ofVocabulary(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return vocabulary[x.Sel.Name]
	case *ast.CallExpr:
		return ofVocabulary(x.Fun)
	case *ast.ParenExpr:
		return ofVocabulary(x.X)
	}
	return false
}
