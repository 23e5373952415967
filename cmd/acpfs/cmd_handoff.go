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

func init() {
	commands = append(commands, newHandoffCmd)
}

func newHandoffCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "handoff",
		Short: "Pass a file from one agent to another as a content-addressed snapshot",
		Long: `A handoff copies one file that the producer's grant can read to
DIR/artifacts/<sha256> (read-only) and records it in DIR/handoffs/H-<id>.json
and in the ledger. The consumer's view shows the handed-over bytes, even if
the original changes afterwards.`,
	}
	cmd.AddCommand(newHandoffCreateCmd(), newHandoffVerifyCmd())
	return cmd
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

func newHandoffVerifyCmd() *cobra.Command {
	var runs, folder, ref string
	cmd := &cobra.Command{
		Use:   "verify [--handoff H] [--folder F]",
		Short: "Re-hash handed-over artifacts and their stored copies; exit 2 on drift or corruption",
		Long: `verify re-hashes the stored copy of each handoff (or of --handoff H) and,
with --folder, the original file. A changed original is drift: the
consumer still reads the bytes handed over, which may no longer be current.
A changed or missing copy is corruption of the run directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rd := grants.NewRunDir(runs)
			var hs []*grants.HandoffArtifact
			var loadErr error
			if ref != "" {
				h, err := rd.FindHandoff(ref)
				if err != nil {
					return err
				}
				hs = []*grants.HandoffArtifact{h}
			} else {
				hs, loadErr = rd.LoadHandoffs()
			}
			out := cmd.OutOrStdout()
			bad := 0
			var errs []error
			if loadErr != nil {
				errs = append(errs, loadErr)
			}
			for _, h := range hs {
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
			if folder == "" && len(hs) > 0 {
				fmt.Fprintln(out, "note: originals not checked (no --folder)")
			}
			if len(hs) == 0 && loadErr == nil {
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
	cmd.Flags().StringVar(&ref, "handoff", "", "one handoff (id or file); default: all")
	return cmd
}
