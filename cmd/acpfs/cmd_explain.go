package main

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
)

func init() { register(newExplainCmd) }

// explainResult is one line of acpfs explain --json.
type explainResult struct {
	Path     string `json:"path"`
	Visible  bool   `json:"visible"`
	Readable bool   `json:"readable"`
	Writable bool   `json:"writable"`
	Rule     string `json:"rule,omitempty"`
	Error    string `json:"error,omitempty"` // the path could not be judged; the other fields are empty
}

// explainLong is the help of acpfs explain.
const explainLong = `explain answers, for each PATH, the questions the filesystem asks: is it
visible (in lookups and listings), readable, writable, and which grant rule
decided. PATH is relative to the collaboration folder; with --folder an
absolute path inside the folder is accepted too, and the run directory is
hidden when it lies inside the folder. "acpfs explain G PATH..." works as
well as --grant G. A PATH that cannot be judged (one that climbs out of
the folder, say) is reported on stderr and the others are still
answered; the exit status is then 2.`

func newExplainCmd() *cobra.Command {
	var runs, ref, folder string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain --grant G [--folder F] PATH...",
		Short: "Say whether a grant shows, lets read and lets write each path, and which rule decided",
		Long:  explainLong,
		Example: `  acpfs explain --runs agent_runs --grant G-reviewer deliverables/design-spec.md oracle/answers.md
  acpfs explain --grant G-reviewer --folder collab --json events.jsonl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ref == "" {
				if len(args) < 2 {
					return fmt.Errorf("name a grant (--grant G) and at least one path")
				}
				ref, args = args[0], args[1:]
			}
			m, err := explainMatcher(runs, ref, folder)
			if err != nil {
				return err
			}
			results, bad := explainPaths(m, folder, args)
			if err := explainPrint(cmd, results, asJSON); err != nil {
				return err
			}
			if bad > 0 {
				return withCode(exitFailed, fmt.Errorf("%d of %d path(s) could not be explained", bad, len(args)))
			}
			return nil
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().StringVar(&ref, "grant", "", "grant id or grant file")
	cmd.Flags().StringVar(&folder, "folder", "", "collaboration folder (hides the run directory if inside it; accepts absolute paths)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// explainMatcher compiles the grant ref names in the run directory runs,
// hiding the run directory when it lies inside folder (as a view does).
func explainMatcher(runs, ref, folder string) (*grants.Matcher, error) {
	rd := grants.NewRunDir(runs)
	g, _, err := rd.FindGrant(ref)
	if err != nil {
		return nil, err
	}
	var opts grants.MatcherOptions
	if folder != "" {
		if opts.Hidden, err = rd.HiddenIn(folder); err != nil {
			return nil, err
		}
	}
	return grants.Compile(g, opts)
}

// explainPaths judges each command-line path, returning one result per
// path (in order) and how many could not be judged.
func explainPaths(m *grants.Matcher, folder string, args []string) ([]explainResult, int) {
	results := make([]explainResult, 0, len(args))
	bad := 0
	for _, a := range args {
		rel, err := explainRel(folder, a)
		if err != nil {
			bad++
			results = append(results, explainResult{Path: a, Error: err.Error()})
			continue
		}
		d := m.Explain(rel)
		results = append(results, explainResult{Path: rel, Visible: d.Visible, Readable: d.Readable, Writable: d.Writable, Rule: d.Rule})
	}
	return results, bad
}

// explainPrint writes the results as JSON or one line each to stdout, and
// the paths that could not be judged to stderr either way.
func explainPrint(cmd *cobra.Command, results []explainResult, asJSON bool) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(errOut, "error: %s\n", r.Error)
			continue
		}
		if asJSON {
			continue
		}
		shown := r.Path
		if shown == "" {
			shown = "."
		}
		fmt.Fprintf(out, "%s: visible %s, readable %s, writable %s (%s)\n",
			shown, explainYes(r.Visible), explainYes(r.Readable), explainYes(r.Writable), r.Rule)
	}
	return nil
}

// explainRel turns a command-line path into the folder-relative form the
// matcher takes.
func explainRel(folder, p string) (string, error) {
	if filepath.IsAbs(p) {
		if folder == "" {
			return "", fmt.Errorf("%s: absolute paths need --folder", p)
		}
		rel, err := handoffRelPath(folder, p)
		if err != nil {
			return "", err
		}
		p = rel
	}
	p = filepath.ToSlash(p)
	// Leading ".." segments name what lies beside the folder, as grant
	// patterns write it (a view rooted at the repository shows it); a
	// ".." after a name is refused, as in a pattern.
	named := false
	for _, s := range strings.Split(p, "/") {
		switch {
		case s == ".." && named:
			return "", fmt.Errorf("%s: escapes the collaboration folder (\"..\" after a name)", p)
		case s != ".." && s != "." && s != "":
			named = true
		}
	}
	c := path.Clean("./" + p)
	if c == "." {
		return "", nil
	}
	return c, nil
}

func explainYes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
