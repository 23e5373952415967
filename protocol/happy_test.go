package protocol

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHappyPathEveryTypeAndMode(t *testing.T) {
	type tc struct {
		name  string
		typ   string
		parts []string
		ext   bool
	}
	var cases []tc
	for _, typ := range DeliverableTypes() {
		cases = append(cases, tc{name: typ + "/2p", typ: typ, parts: []string{"server", "reader"}})
	}
	cases = append(cases,
		tc{name: "design-spec/3p", typ: "design-spec", parts: []string{"server", "reader", "critic"}},
		tc{name: "adr/4p", typ: "adr", parts: []string{"owner", "b", "c", "d"}},
		tc{name: "decision-memo/external", typ: "decision-memo", parts: []string{"server", "reader"}, ext: true},
		tc{name: "custom/external/3p", typ: CustomType, parts: []string{"a", "b", "c"}, ext: true},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			o := kitOptions(filepath.Join(root, "collab"), c.typ, c.parts...)
			if c.ext {
				o.Folder = filepath.Join(root, "repo", ".acp", "run")
				o.Mode, o.RepoRoot, o.Dir = "external", "../..", "docs/acp-output"
			}
			k := newKit(t, o)
			res := Validate(k.dir)
			require.Empty(t, res.Errors, "fresh folder")
			k.happy()
			res = Validate(k.dir)
			assert.Empty(t, res.Errors)
			assert.Empty(t, res.Warnings)
			s := k.log.Snapshot()
			assert.Equal(t, PhaseCompleted, s.Phase)
			assert.Empty(t, s.WaitingFor)
			require.Len(t, s.Frozen, 1)
			for key := range s.Frozen {
				if c.ext {
					assert.True(t, filepath.IsAbs(key), key)
				} else {
					assert.Equal(t, "deliverables/"+k.proto().Primary.File, key)
				}
			}
			// A fresh replay derives the same state.
			l2, err := OpenLog(k.dir)
			require.NoError(t, err)
			assert.Equal(t, s, l2.Snapshot())
			assert.Nil(t, l2.historyBad)
		})
	}
}
