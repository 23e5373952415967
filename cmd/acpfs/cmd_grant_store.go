package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
)

// grantCreateInStore stores g for the host named by --host; that host's
// `acpfs up --store` copies it into its run directory, records it and
// mounts it.
func grantCreateInStore(cmd *cobra.Command, sf storeFlags, g *grants.Grant) error {
	if sf.host == "" {
		return errors.New("--store needs --host: the host that mounts the grant")
	}
	st, err := sf.open(cmd.Context(), true)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.CreateGrant(sf.host, g); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "created %s for agent %s (participant %s) in %s, mounted by host %s\n",
		g.GrantID, g.AgentID, g.ParticipantID(), sf.collab, sf.host)
	return nil
}

// grantRevokeInStore marks the stored grant revoked; the host that
// mounts it hides everything in the view and records the revocation
// (--reason is not carried: the grant has no field for it).
func grantRevokeInStore(cmd *cobra.Command, sf storeFlags, ref string) error {
	st, err := sf.open(cmd.Context(), false)
	if err != nil {
		return err
	}
	defer st.Close()
	e, err := st.FindGrant(ref)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if e.Grant.Revoked {
		fmt.Fprintf(out, "%s was already revoked at %s\n", e.Grant.GrantID, e.Grant.RevokedAt)
		return nil
	}
	e.Grant.Revoked, e.Grant.RevokedAt = true, grantRevokedNow()
	if err := st.UpdateGrant(e); err != nil {
		return err
	}
	fmt.Fprintf(out, "revoked %s (agent %s, host %s) at %s\n", e.Grant.GrantID, e.Grant.AgentID, e.Host, e.Grant.RevokedAt)
	return nil
}
