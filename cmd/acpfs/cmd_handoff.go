package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

func init() { register(newHandoffCmd) }

func newHandoffCmd() *cobra.Command {
	return groupCmd("handoff", "Pass a file from one agent to another as a content-addressed snapshot",
		`A handoff copies one file that the producer's grant can read to
DIR/artifacts/<sha256> (read-only) and records it in DIR/handoffs/H-<id>.json
and in the ledger. The consumer's view shows the handed-over bytes, even if
the original changes afterwards.

Handing a path to an agent that already received it supersedes the earlier
handoff: the new record names it ("supersedes"), the view shows the new
copy, and list and verify treat the old one as superseded.`,
		newHandoffCreateCmd(), newHandoffListCmd(), newHandoffVerifyCmd())
}

// handoffRelPath turns a path given on the command line into a
// folder-relative one: relative paths are taken as relative to the
// folder, absolute ones must lie inside it.
func handoffRelPath(folder, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return filepath.ToSlash(p), nil
	}
	base, err := filepath.Abs(folder)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is not inside the collaboration folder %s", p, folder)
	}
	return filepath.ToSlash(rel), nil
}

func newHandoffCreateCmd() *cobra.Command {
	var runs, folder, from, to, path, id, typ, summary, action string
	cmd := &cobra.Command{
		Use:     "create --folder F --from G1 --to G2 --path P [--type T --summary S --action A]",
		Short:   "Hand a file over from grant G1's agent to grant G2's agent; record handoff_recorded",
		Example: `  acpfs handoff create --folder collab --from G-owner --to G-reviewer --path deliverables/design-spec.md --type design-spec --action "review it"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rd := grants.NewRunDir(runs)
			src, _, err := rd.FindGrant(from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			dst, _, err := rd.FindGrant(to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			rel, err := handoffRelPath(folder, path)
			if err != nil {
				return err
			}
			h, err := rd.CreateHandoff(grants.HandoffRequest{
				ID: id, Folder: folder, Source: src, Target: dst, ArtifactPath: rel,
				Type: typ, Summary: summary, Action: action,
			})
			if err != nil {
				return err
			}
			detail := fmt.Sprintf("%s: %s (%s) to %s (%s)", h.HandoffID, h.ProducerAgentID, h.SourceGrantID, h.ConsumerAgentID, h.TargetGrantID)
			if h.Supersedes != "" {
				detail += "; supersedes " + h.Supersedes
			}
			if err := grantRecord(rd, ledger.Record{
				Kind: ledger.KindHandoffRecorded, Agent: h.ProducerAgentID, Grant: h.SourceGrantID,
				Path: h.ArtifactPath, SHA256: h.ArtifactSHA256, Detail: detail,
			}); err != nil {
				return fmt.Errorf("handoff %s was stored but not recorded: %w", h.HandoffID, err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "recorded %s: %s from %s to %s\n", h.HandoffID, h.ArtifactPath, h.ProducerAgentID, h.ConsumerAgentID)
			if m, err := grants.Compile(dst, grants.MatcherOptions{}); err == nil && !m.Readable(h.ArtifactPath) {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: grant %s does not cover %s; its view may not show the handed-over copy\n", dst.GrantID, h.ArtifactPath)
			}
			fmt.Fprintf(out, "  sha256:   %s\n  copy:     %s\n  handoff:  %s\n", h.ArtifactSHA256, rd.ArtifactPath(h.ArtifactSHA256), rd.HandoffPath(h.HandoffID))
			if h.Supersedes != "" {
				fmt.Fprintf(out, "  supersedes: %s (%s no longer sees its copy)\n", h.Supersedes, h.ConsumerAgentID)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	grantRunsFlag(cmd, &runs)
	fl.StringVar(&folder, "folder", "", "collaboration folder")
	fl.StringVar(&from, "from", "", "producer's grant (id or file)")
	fl.StringVar(&to, "to", "", "consumer's grant (id or file)")
	fl.StringVar(&path, "path", "", "file to hand over, relative to the folder")
	fl.StringVar(&id, "id", "", "handoff id H-<id> (default: generated)")
	fl.StringVar(&typ, "type", "", "artifact_type")
	fl.StringVar(&summary, "summary", "", "non_authoritative_summary")
	fl.StringVar(&action, "action", "", "required_consumer_action")
	for _, f := range []string{"folder", "from", "to", "path"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// handoffListEntry is one element of handoff list --json.
type handoffListEntry struct {
	Handoff      *grants.HandoffArtifact `json:"handoff"`
	Current      bool                    `json:"current"`
	SupersededBy string                  `json:"superseded_by,omitempty"`
	Superseded   []string                `json:"superseded,omitempty"` // newest first
}

func newHandoffListCmd() *cobra.Command {
	var runs string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--all] [--json]",
		Short: "List the current handoffs and what each one superseded",
		Long: `list shows, for every consumer agent and artifact path, the handoff in
force (the one its view shows) and the earlier handoffs it superseded,
newest first. --all also lists the superseded handoffs themselves.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rd := grants.NewRunDir(runs)
			states, loadErr := rd.LoadHandoffStates()
			out := cmd.OutOrStdout()
			var shown []grants.HandoffState
			for _, st := range states {
				if all || st.Current() {
					shown = append(shown, st)
				}
			}
			if asJSON {
				entries := make([]handoffListEntry, 0, len(shown))
				for _, st := range shown {
					entries = append(entries, handoffListEntry{Handoff: st.Handoff, Current: st.Current(), SupersededBy: st.SupersededBy, Superseded: st.Replaced})
				}
				return listed(protoPrintJSON(out, entries), loadErr)
			}
			rows := [][]string{{"HANDOFF", "FROM", "TO", "PATH", "SHA256", "CREATED", "STATE", "SUPERSEDES"}}
			for _, st := range shown {
				h := st.Handoff
				state := "current"
				if !st.Current() {
					state = "superseded by " + st.SupersededBy
				}
				replaced := "-"
				if len(st.Replaced) > 0 {
					replaced = strings.Join(st.Replaced, ", ")
				}
				rows = append(rows, []string{h.HandoffID, h.ProducerAgentID, h.ConsumerAgentID,
					h.ArtifactPath, shortSHA(h.ArtifactSHA256), h.CreatedAt, state, replaced})
			}
			return listed(printTable(out, rows), loadErr)
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().BoolVar(&all, "all", false, "also list the superseded handoffs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// shortSHA abbreviates a hash for tables.
func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func newHandoffVerifyCmd() *cobra.Command {
	var runs, folder, ref string
	cmd := &cobra.Command{
		Use:   "verify [--handoff H] [--folder F]",
		Short: "Re-hash the current handoffs' artifacts and stored copies; exit 2 on drift or corruption",
		Long: `verify re-hashes the stored copy of each current handoff (or of --handoff H)
and, with --folder, the original file. A changed original is drift: the
consumer still reads the bytes handed over, which may no longer be current.
A changed or missing copy is corruption of the run directory.

A superseded handoff (the same path was handed to the same agent again)
is listed as superseded and not checked: no view shows its copy any more.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rd := grants.NewRunDir(runs)
			states, loadErr := rd.LoadHandoffStates()
			if ref != "" {
				h, err := rd.FindHandoff(ref)
				if err != nil {
					return err
				}
				one := grants.HandoffState{Handoff: h}
				for _, st := range states {
					if st.Handoff.HandoffID == h.HandoffID {
						one = st
					}
				}
				states, loadErr = []grants.HandoffState{one}, nil
			}
			out := cmd.OutOrStdout()
			bad, checked := 0, 0
			var errs []error
			if loadErr != nil {
				errs = append(errs, loadErr)
			}
			for _, st := range states {
				h := st.Handoff
				if !st.Current() {
					fmt.Fprintf(out, "superseded %s  %s  by %s (not checked)\n", h.HandoffID, h.ArtifactPath, st.SupersededBy)
					continue
				}
				checked++
				c, err := rd.VerifyHandoff(h, folder)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if c.OK() {
					fmt.Fprintf(out, "ok %s  %s  %s\n", h.HandoffID, h.ArtifactPath, h.ArtifactSHA256)
					continue
				}
				bad++
				for _, p := range c.Problems() {
					fmt.Fprintf(out, "drift: %s\n", p)
				}
			}
			if folder == "" && checked > 0 {
				fmt.Fprintln(out, "note: originals not checked (no --folder)")
			}
			if len(states) == 0 && loadErr == nil {
				fmt.Fprintf(out, "no handoffs in %s\n", rd.HandoffsDir())
			}
			if err := errors.Join(errs...); err != nil {
				return withCode(exitFailed, err)
			}
			if bad > 0 {
				return withCode(exitFailed, fmt.Errorf("%d handoff(s) drifted or corrupted", bad))
			}
			return nil
		},
	}
	grantRunsFlag(cmd, &runs)
	cmd.Flags().StringVar(&folder, "folder", "", "collaboration folder, to check the originals too")
	cmd.Flags().StringVar(&ref, "handoff", "", "one handoff (id or file); default: all current ones")
	return cmd
}
