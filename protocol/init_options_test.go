package protocol

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckInitOptions(t *testing.T) {
	valid := func(change func(*InitOptions)) InitOptions {
		o := InitOptions{
			Participants: []string{"server", "reader"},
			Objective:    "Ship the cache",
			Completion:   []string{"Spec accepted"},
			PrimaryType:  "design-spec",
		}
		if change != nil {
			change(&o)
		}
		return o
	}
	cases := []struct {
		name       string
		opts       InitOptions
		usage      string   // the *UsageError's message, "" when the options are valid
		want       initPlan // checked only when usage is ""
		primaryRef string
	}{
		{name: "defaults", opts: valid(nil), want: initPlan{
			objective: "Ship the cache", participants: []string{"server", "reader"}, objGates: []string{"Spec accepted"},
			primaryType: "design-spec", primaryFile: "design-spec.md", mode: "internal", dir: "deliverables",
		}, primaryRef: "deliverables/design-spec.md"},
		{name: "blanks stripped, repeats dropped", opts: valid(func(o *InitOptions) {
			o.Objective = "  Ship  "
			o.Participants = []string{" server ", "", "reader", "server"}
			o.Completion = []string{" ", "Spec accepted "}
		}), want: initPlan{
			objective: "Ship", participants: []string{"server", "reader"}, objGates: []string{"Spec accepted"},
			primaryType: "design-spec", primaryFile: "design-spec.md", mode: "internal", dir: "deliverables",
		}, primaryRef: "deliverables/design-spec.md"},
		{name: "custom with checks", opts: valid(func(o *InitOptions) {
			o.PrimaryType, o.PrimaryFile, o.PrimaryChecks = CustomType, "notes.md", []string{" Scope ", ""}
		}), want: initPlan{
			objective: "Ship the cache", participants: []string{"server", "reader"}, objGates: []string{"Spec accepted"},
			primaryType: CustomType, primaryFile: "notes.md", checks: []string{"Scope"}, mode: "internal", dir: "deliverables",
		}, primaryRef: "deliverables/notes.md"},
		{name: "external", opts: valid(func(o *InitOptions) { o.Mode, o.RepoRoot, o.Dir = "external", "..", "docs" }), want: initPlan{
			objective: "Ship the cache", participants: []string{"server", "reader"}, objGates: []string{"Spec accepted"},
			primaryType: "design-spec", primaryFile: "design-spec.md", mode: "external", dir: "docs", repoRoot: "..",
		}, primaryRef: "external:design-spec.md"},
		{name: "blank objective", opts: valid(func(o *InitOptions) { o.Objective = " " }), usage: "--objective must not be blank"},
		{name: "one participant", opts: valid(func(o *InitOptions) { o.Participants = []string{"server", " server"} }),
			usage: "at least two distinct non-blank --participant values are required"},
		{name: "no gate", opts: valid(func(o *InitOptions) { o.Completion = []string{""} }), usage: "at least one non-blank --completion is required"},
		{name: "unknown type", opts: valid(func(o *InitOptions) { o.PrimaryType = "poem" }),
			usage: "--primary-deliverable-type must be one of adr, custom, decision-memo, design-spec, implementation-plan, review-report, test-plan"},
		{name: "unknown mode", opts: valid(func(o *InitOptions) { o.Mode = "remote" }), usage: "--deliverables-mode must be internal or external"},
		{name: "custom without file", opts: valid(func(o *InitOptions) { o.PrimaryType = CustomType }),
			usage: "custom deliverables require --primary-deliverable-file"},
		{name: "custom without checks", opts: valid(func(o *InitOptions) { o.PrimaryType, o.PrimaryFile = CustomType, "x.md" }),
			usage: "custom deliverables require at least one --primary-deliverable-check"},
		{name: "not markdown", opts: valid(func(o *InitOptions) { o.PrimaryFile = "spec.txt" }), usage: "the primary deliverable file must end with .md"},
		{name: "file escapes", opts: valid(func(o *InitOptions) { o.PrimaryFile = "../spec.md" }),
			usage: "the primary deliverable file must be relative and must not contain .."},
		{name: "dir escapes", opts: valid(func(o *InitOptions) { o.Dir = "/tmp" }), usage: "--deliverables-dir must be relative and must not contain .."},
		{name: "external without repo root", opts: valid(func(o *InitOptions) { o.Mode = "external" }),
			usage: "--repo-root is required with --deliverables-mode external"},
		{name: "absolute repo root", opts: valid(func(o *InitOptions) { o.Mode, o.RepoRoot = "external", "/srv" }),
			usage: "--repo-root must be relative to the collaboration folder"},
		{name: "repo root when internal", opts: valid(func(o *InitOptions) { o.RepoRoot = ".." }),
			usage: "--repo-root is only allowed with --deliverables-mode external"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := checkInitOptions(c.opts)
			if c.usage != "" {
				var ue *UsageError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, c.usage, ue.Msg)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.primaryRef, got.primaryRef())
		})
	}
}
