package main

import (
	"fmt"

	"github.com/acpfs/acpfs/protocol"
	"github.com/spf13/cobra"
)

func init() { registerPerEvent("next", newNextCmd) }

func newNextCmd() *cobra.Command {
	var folder, participant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "next",
		Short: "Show the next ACP action for a participant",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := protoStatus(folder, participant)
			if err != nil {
				return err
			}
			if err := protoPrintStatus(cmd, st, asJSON); err != nil {
				return err
			}
			if st.Invalid {
				return silentExit(exitWarnings)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&folder, "folder", "", "collaboration folder")
	cmd.Flags().StringVar(&participant, "participant", "", "participant id")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	_ = cmd.MarkFlagRequired("folder")
	_ = cmd.MarkFlagRequired("participant")
	return cmd
}

// protoStatus opens the folder's log and computes participant's status.
func protoStatus(folder, participant string) (protocol.Status, error) {
	dir, err := protoFolder(folder)
	if err != nil {
		return protocol.Status{}, withCode(exitFailed, err)
	}
	l, err := protocol.OpenLog(dir)
	if err != nil {
		return protocol.Status{}, withCode(exitFailed, err)
	}
	defer l.Close()
	st, err := l.Status(participant)
	if err != nil {
		return protocol.Status{}, withCode(exitFailed, err)
	}
	return st, nil
}

func protoPrintStatus(cmd *cobra.Command, st protocol.Status, asJSON bool) error {
	if asJSON {
		if st.WaitingFor == nil {
			st.WaitingFor = []string{}
		}
		if err := protoPrintJSON(cmd.OutOrStdout(), st); err != nil {
			return withCode(exitFailed, err)
		}
		return nil
	}
	fmt.Fprint(cmd.OutOrStdout(), st.String())
	return nil
}
