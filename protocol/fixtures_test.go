package protocol

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateFixtures = flag.Bool("update", false, "regenerate the committed fixtures in testdata/protocol")

const fixturesDir = "../testdata/protocol"

// fixture is one entry of testdata/protocol/fixtures.json.
type fixture struct {
	Name   string   `json:"name"`
	Folder string   `json:"folder"`          // collaboration folder, relative to the fixture
	Exit   int      `json:"exit"`            // expected validate exit code
	Phase  string   `json:"phase"`           // expected derived phase
	Rules  []string `json:"rules,omitempty"` // rules the validator must report
	Note   string   `json:"note"`
}

// fixtureBuilders generate the committed fixtures with a fixed clock.
var fixtureBuilders = []struct {
	f     fixture
	build func(t *testing.T, root string) *kit
}{
	{fixture{Name: "happy-2p-design-spec", Folder: "collab", Exit: 0, Phase: PhaseCompleted,
		Note: "two participants, internal deliverables, complete path to completed"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "design-spec"))
			k.happy()
			return k
		}},
	{fixture{Name: "happy-3p-adr", Folder: "collab", Exit: 0, Phase: PhaseCompleted,
		Note: "three participants, two reviews, three acceptances"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "adr", "architect", "security", "operations"))
			k.happy()
			return k
		}},
	{fixture{Name: "happy-external-decision-memo", Folder: "repo/.acp/run", Exit: 0, Phase: PhaseCompleted,
		Note: "external deliverables: repoRoot ../.., dir docs/acp-output"},
		func(t *testing.T, root string) *kit {
			o := kitOptions(filepath.Join(root, "repo", ".acp", "run"), "decision-memo")
			o.Mode, o.RepoRoot, o.Dir = "external", "../..", "docs/acp-output"
			k := newKit(t, o)
			k.happy()
			return k
		}},
	{fixture{Name: "fresh-custom", Folder: "collab", Exit: 0, Phase: PhaseDrafting,
		Note: "custom primary deliverable with a checklist, right after init"},
		func(t *testing.T, root string) *kit {
			return newKit(t, kitOptions(filepath.Join(root, "collab"), CustomType))
		}},
	{fixture{Name: "reviewing-3p-test-plan", Folder: "collab", Exit: 0, Phase: PhaseReviewing,
		Note: "one of two reviews submitted"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "test-plan", "lead", "qa", "dev"))
			for _, s := range k.happySteps()[:3] {
				s()
			}
			return k
		}},
	{fixture{Name: "warning-deferred-reason", Folder: "collab", Exit: 1, Phase: PhaseRevising,
		Note: "a deferred item without Reason: is a warning before completion"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "implementation-plan"))
			for _, s := range k.happySteps()[:3] {
				s()
			}
			k.replace(ReadinessFile, "## Blocking Issues", "- [deferred_nonblocking] Pick a rollout window.\n\n## Blocking Issues")
			return k
		}},
	{fixture{Name: "broken-seq-gap", Folder: "collab", Exit: 2, Phase: PhaseReviewing, Rules: []string{"seq-continuous"},
		Note: "seq 3 is missing"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "review-report"))
			for _, s := range k.happySteps()[:2] {
				s()
			}
			k.editLine(3, func(s string) string { return strings.Replace(s, `"seq":3`, `"seq":4`, 1) })
			return k
		}},
	{fixture{Name: "broken-frozen-changed", Folder: "collab", Exit: 2, Phase: PhaseCompleted, Rules: []string{"sha256-mismatch"},
		Note: "the primary deliverable was edited after deliverable_frozen"},
		func(t *testing.T, root string) *kit {
			k := newKit(t, kitOptions(filepath.Join(root, "collab"), "design-spec"))
			k.happy()
			k.write(k.primaryPath(), string(mustRead(t, k.primaryPath()))+"\nA late change.\n")
			return k
		}},
}

func loadFixtures(t *testing.T) []fixture {
	b, err := os.ReadFile(filepath.Join(fixturesDir, "fixtures.json"))
	require.NoError(t, err)
	var fs []fixture
	require.NoError(t, json.Unmarshal(b, &fs))
	return fs
}

func TestFixtures(t *testing.T) {
	if *updateFixtures {
		regenerateFixtures(t)
	}
	fixtures := loadFixtures(t)
	require.Len(t, fixtures, len(fixtureBuilders))
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			folder := filepath.Join(fixturesDir, f.Name, f.Folder)
			res := Validate(folder)
			assert.Equal(t, f.Exit, res.ExitCode(), "errors %v warnings %v", res.Errors, res.Warnings)
			got := rulesOf(res.Errors)
			for _, r := range f.Rules {
				assert.Contains(t, got, r)
			}
			l, err := OpenLog(folder)
			require.NoError(t, err)
			assert.Equal(t, f.Phase, l.Snapshot().Phase)
			if f.Exit < 2 {
				assert.Nil(t, l.historyBad)
			}
		})
	}
}

// TestFixturesAreCurrent regenerates every fixture in a temporary
// directory and compares it byte for byte with the committed one.
func TestFixturesAreCurrent(t *testing.T) {
	for _, b := range fixtureBuilders {
		t.Run(b.f.Name, func(t *testing.T) {
			root := t.TempDir()
			b.build(t, root)
			want := treeOf(t, filepath.Join(fixturesDir, b.f.Name))
			assert.Equal(t, want, treeOf(t, root), "run go test ./protocol -run TestFixtures -update")
		})
	}
}

func treeOf(t *testing.T, root string) map[string]string {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.Base(rel) == LockFile {
			return nil // the appenders' lock, no content
		}
		b, err := os.ReadFile(path)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	require.NoError(t, err)
	return out
}

func regenerateFixtures(t *testing.T) {
	var manifest []fixture
	for _, b := range fixtureBuilders {
		dst := filepath.Join(fixturesDir, b.f.Name)
		require.NoError(t, os.RemoveAll(dst))
		root := t.TempDir()
		b.build(t, root)
		for rel, content := range treeOf(t, root) {
			path := filepath.Join(dst, filepath.FromSlash(rel))
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		}
		manifest = append(manifest, b.f)
	}
	data, err := json.MarshalIndent(manifest, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(fixturesDir, "fixtures.json"), append(data, '\n'), 0o644))
}
