package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/acpfs/acpfs/protocol"
	"github.com/spf13/cobra"
)

func init() { register(newInitCmd) }

func newInitCmd() *cobra.Command {
	var o protocol.InitOptions
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create an ACP schema v2 collaboration folder",
		Long: `Create an ACP schema v2 collaboration folder: protocol.json, the protocol
documents, the primary deliverable skeleton and events.jsonl with the
initialized event. The first --participant owns the proposal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := protoChoice("primary-deliverable-type", o.PrimaryType, protocol.DeliverableTypes()); err != nil {
				return err
			}
			if err := protoChoice("deliverables-mode", o.Mode, []string{"internal", "external"}); err != nil {
				return err
			}
			// The folder (or, when it is to be made, its directory).
			at := o.Folder
			if _, err := os.Stat(at); err != nil {
				at = filepath.Dir(at)
			}
			if _, err := os.Stat(at); err == nil {
				if err := refuseFolderInRunDir(at); err != nil {
					return withCode(exitFailed, err)
				}
			}
			res, err := protocol.Init(o)
			if err != nil {
				var ue *protocol.UsageError
				if errors.As(err, &ue) {
					return withCode(exitFailed, err)
				}
				return withCode(exitFailed, fmt.Errorf("init %s: %w", o.Folder, err))
			}
			out := cmd.OutOrStdout()
			if res.Resumed {
				fmt.Fprintf(out, "collaboration folder already exists: %s\n", res.Folder)
				return nil
			}
			if res.Kept != "" {
				fmt.Fprintf(out, "kept the existing primary deliverable %s\n", res.Kept)
			}
			fmt.Fprintf(out, "initialized ACP schema v2 collaboration folder: %s\n", res.Folder)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Folder, "folder", "", "shared collaboration folder (created if missing)")
	f.StringArrayVar(&o.Participants, "participant", nil, "participant id; repeat for each participant, the first one initializes")
	f.StringVar(&o.Objective, "objective", "", "collaboration objective")
	f.StringArrayVar(&o.Completion, "completion", nil, "objective completion gate; repeat for several")
	f.StringVar(&o.PrimaryType, "primary-deliverable-type", "", "primary deliverable type: "+joinComma(protocol.DeliverableTypes()))
	f.StringVar(&o.PrimaryFile, "primary-deliverable-file", "", "primary Markdown deliverable, relative to the deliverables dir")
	f.StringArrayVar(&o.PrimaryChecks, "primary-deliverable-check", nil, "required section of a custom primary deliverable; repeat for several")
	f.StringVar(&o.Mode, "deliverables-mode", "internal", "internal (deliverables in the folder) or external (in the repository)")
	f.StringVar(&o.Dir, "deliverables-dir", "deliverables", "deliverables directory (relative to the folder, or to --repo-root in external mode)")
	f.StringVar(&o.RepoRoot, "repo-root", "", "external mode: repository root, relative to the folder")
	f.BoolVar(&o.Resume, "resume", false, "succeed if the folder already holds a collaboration")
	for _, name := range []string{"folder", "participant", "objective", "completion", "primary-deliverable-type"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func joinComma(items []string) string {
	out := ""
	for i, s := range items {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}
