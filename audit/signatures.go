package audit

import (
	"fmt"
	"strings"

	"github.com/acpfs/acpfs/ledger"
)

// Signature statuses a report shows at its top (Signatures.Status).
const (
	SigVerified     = "verified"                // every record is covered by a valid signature
	SigLiveTail     = "verified, live tail"     // with --live: the last records are not signed yet, and are judged
	SigNoKey        = "no public key"           // signatures not checked: nothing is judged
	SigForged       = "forged"                  // a signature does not match, or a record that must be signed is not
	SigUnknownKey   = "unknown key"             // signed by a key the audit was not given
	SigUnsignedTail = "unsigned tail"           // records after the last valid signature
	SigBroken       = "broken chain"            // the chain itself breaks (edited, removed, torn ...)
	SigNotChecked   = "not checked"             // the caller passed no chain check
	sigUnknown      = "signatures not verified" // a chain problem of a kind this package does not know
)

// Signatures is what a report says of the ledger's signatures: the audit
// judges only the records they cover, so a reviewer reads this first.
type Signatures struct {
	Status string `json:"status"` // one of the Sig* constants
	// Keys are the ids (16 hex digits of the SHA-256 of the public key)
	// the signatures were checked against; none without a public key.
	Keys []string `json:"keys,omitempty"`
	// Signers are the ids of the keys whose valid signatures were found.
	Signers []string `json:"signers,omitempty"`
	// Covered is how many records (seq 1 to Covered) valid signatures
	// cover; Total how many records the ledger holds as read.
	Covered int64 `json:"covered"`
	Total   int64 `json:"total"`
	// Detail says why, and what to do about it.
	Detail string `json:"detail"`
}

// Verified reports whether the signatures vouch for every record judged.
func (s Signatures) Verified() bool { return s.Status == SigVerified || s.Status == SigLiveTail }

// KeyList is the keys for display: "none" when there is none.
func (s Signatures) KeyList() string {
	if len(s.Keys) == 0 {
		return "none"
	}
	return strings.Join(s.Keys, ", ")
}

// signatureStatus reads the chain check the way trustedThrough does, and
// says so in words. total is the number of records fed to the audit.
func signatureStatus(c *ledger.VerifyReport, live bool, total int64) Signatures {
	s := Signatures{Total: total}
	if c == nil {
		s.Status = SigNotChecked
		s.Detail = "the caller passed no chain check: the verdict is the records' alone"
		return s
	}
	s.Keys = c.Keys
	for _, sg := range c.Signers {
		s.Signers = append(s.Signers, sg.Key)
	}
	if !c.SignaturesChecked {
		s.Status = SigNoKey
		s.Detail = fmt.Sprintf("no %s beside the ledger and no --pubkey given, so the signatures were not checked: anyone who can write the ledger could have written every record, and none is judged; pass the %s kept with the deliverables: --pubkey FILE",
			ledger.PublicKeyFile, ledger.PublicKeyFile)
		return s
	}
	s.Covered = c.SignedThrough
	notJudged := fmt.Sprintf("the records after seq %d are not judged", c.SignedThrough)
	p := c.Problem
	switch {
	case p == nil && c.Unsigned == 0:
		s.Status = SigVerified
		s.Detail = fmt.Sprintf("every record is covered by a valid signature of key %s", strings.Join(s.Signers, ", "))
		if len(s.Signers) == 0 {
			s.Detail = "the ledger holds no record"
		}
	case p == nil:
		s.Status = SigLiveTail
		s.Detail = fmt.Sprintf("seq %d–%d are not signed yet: judged because of --live (the views' writers sign within a second); without --live they would not be",
			c.SignedThrough+1, c.LastSeq)
		if !live {
			// A tail allowed by the chain check but not by the audit.
			s.Status, s.Detail = SigUnsignedTail, notJudged
		}
	case p.Kind == ledger.ProblemForged:
		s.Status = SigForged
		s.Detail = fmt.Sprintf("seq %d: %s; %s", p.Seq, p.Reason, notJudged)
	case p.Kind == ledger.ProblemUnknownKey:
		s.Status = SigUnknownKey
		s.Detail = fmt.Sprintf("seq %d: %s; %s", p.Seq, p.Reason, notJudged)
	case p.Kind == ledger.ProblemUnsignedTail:
		s.Status = SigUnsignedTail
		s.Detail = fmt.Sprintf("%s; %s (audit with --live while the views are still mounted)", p.Reason, notJudged)
	case p.Kind == ledger.ProblemGarbage, p.Kind == ledger.ProblemHash, p.Kind == ledger.ProblemNonCanonical,
		p.Kind == ledger.ProblemSeq, p.Kind == ledger.ProblemPrev, p.Kind == ledger.ProblemTorn,
		p.Kind == ledger.ProblemTruncated, p.Kind == ledger.ProblemRewritten, p.Kind == ledger.ProblemSegment:
		s.Status = SigBroken
		s.Detail = fmt.Sprintf("the chain breaks at seq %d (%s); %s", p.Seq, p.Kind, notJudged)
	default:
		s.Status = sigUnknown
		s.Detail = fmt.Sprintf("seq %d: %s: %s; %s", p.Seq, p.Kind, p.Reason, notJudged)
	}
	return s
}
