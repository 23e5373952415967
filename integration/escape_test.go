package integration

import (
	"testing"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// The escape suite: an agent with ordinary tools and raw system calls
// tries to read what its grant hides, write outside may_write, change a
// frozen deliverable and forge protocol state. Attempts are grouped by
// family, one collaboration per family; escRun checks each one (refusal,
// ledger record, last-error, untouched backing folder).

const (
	escNFC      = "r\u00e9ponse" // a hidden directory with a non-ASCII name
	escNFD      = "re\u0301ponse"
	escCyrillic = "or\u0430cle" // "oracle" with a Cyrillic a
)

// escReaderGrant may read everything except the oracle, a private
// scratch directory and escNFC, and write in scratch/.
func escReaderGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-esc-read", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       []string{"**"},
		ForbiddenRead: []string{"oracle/**", "scratch/private/**", "scratch/ghost/**", escNFC + "/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "scratch/**"},
	}
}

// escWriterGrant reads the protocol documents and writes only review.md,
// the protocol files and scratch/.
func escWriterGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-esc-write", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       append([]string{"scratch/**"}, protocolDocs...),
		ForbiddenRead: []string{"oracle/**", "scratch/private/**", "scratch/ghost/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "scratch/**"},
	}
}

// escDeniedLookup is the record of a lookup refused because the grant
// hides path.
func escDeniedLookup(path string) *escRecord { return escRec(ledger.KindDenied, path, "lookup") }

// escHiddenSymlink is the record of a planted symlink concealed where it
// is: symlinks are judged at every lookup from where they are, and one
// leading to a hidden path or out of the folder is concealed.
func escHiddenSymlink(path string) *escRecord { return escConcealed(path, escSymlinkHidden) }

// escHardLinkedRec is the record of a regular file with a second name,
// concealed under every name.
func escHardLinkedRec(path string) *escRecord { return escConcealed(path, escHardLinked) }

// escRunFamilies runs the attempts of every family, in order, as one
// escRun in the view of e.
func escRunFamilies(t *testing.T, e escEnv, families ...[]escAttempt) {
	t.Helper()
	var all []escAttempt
	for _, f := range families {
		all = append(all, f...)
	}
	escRun(t, e, all)
}
