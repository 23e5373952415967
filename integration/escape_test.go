package integration

import (
	"github.com/acpfs/acpfs/grants"
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
