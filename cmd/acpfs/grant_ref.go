package main

import (
	"errors"
	"path/filepath"

	"github.com/acpfs/acpfs/grants"
)

// ledgerGrantID turns ledger show's --grant into the grant id its records
// carry. The reference is any grant reference (grants.Resolve), resolved
// in the run directory that holds the ledger; a grant id that directory
// no longer holds is kept as it is, since the ledger outlives grants
// removed since, and so is any reference when the ledger lies in no run
// directory (a name then stands for the grant id G-<name>).
func ledgerGrantID(ledgerPath, ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	rd := grants.NewRunDir(filepath.Dir(ledgerPath))
	if ledgerPath == "" {
		rd = grants.NewRunDir("")
	}
	g, _, err := rd.FindGrant(ref)
	var nf *grants.NoGrantError
	switch {
	case err == nil:
		return g.GrantID, nil
	case errors.As(err, &nf) && !grants.IsGrantFileRef(ref):
		return nf.ID, nil
	}
	return "", err
}
