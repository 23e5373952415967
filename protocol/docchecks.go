package protocol

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/acpfs/acpfs/internal/digest"
)

// docChecks applies the rules of an append that depend on documents of
// the folder rather than on the event history: the frozen deliverable's
// hash, the readiness gates and the conclusion. It runs only for a new
// event, never during a replay, so a later edit of readiness.md does not
// turn old events invalid.
func docChecks(folder string, p *Protocol, r *record) []Violation {
	var viol []Violation
	v := func(rule, format string, args ...any) {
		viol = append(viol, Violation{File: EventsFile, Line: r.line, Seq: r.Seq, Rule: rule, Msg: fmt.Sprintf(format, args...), Kind: Rejected})
	}
	name := r.Event.Event
	if name == EvDeliverableFrozen && (r.Role == RolePrimary || r.Role == RoleSupporting) && IsSHA256(r.SHA256) {
		if file, why := p.deliverableFile(r.Doc, r.Role); why == "" {
			path, err := p.DeliverablePath(folder, file)
			if err != nil {
				v("deliverable-doc", "%v", err)
				return viol
			}
			sum, err := digest.File(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				v("deliverable-missing", "deliverable %s does not exist", r.Doc)
			case err != nil:
				v("deliverable-missing", "cannot read deliverable %s: %v", r.Doc, err)
			case sum != r.SHA256:
				v("sha256-mismatch", "sha256 %s does not match the current content of %s (%s)", r.SHA256, r.Doc, sum)
			}
		}
	}
	gated := name == EvDecisionAccepted || name == EvReadinessPassed || name == EvCompleted
	if !gated {
		return viol
	}
	rd, err := ScanReadiness(folder)
	if err != nil {
		v("readiness", "%v", err)
		return viol
	}
	if len(rd.Blocking) > 0 {
		v("readiness-blocking", "readiness.md still lists %d [blocking] item(s); clear them before %s", len(rd.Blocking), name)
	}
	if len(rd.Unresolved) > 0 {
		v("readiness-unresolved", "readiness.md still has %d unresolved item(s) ([unresolved] or TBD); classify them before %s", len(rd.Unresolved), name)
	}
	if len(rd.DeferredMissingReason) > 0 {
		v("readiness-reason", "readiness.md has %d [deferred_nonblocking] item(s) without \"Reason:\"", len(rd.DeferredMissingReason))
	}
	if name == EvDecisionAccepted {
		return viol
	}
	if !rd.ReadyToImplement {
		v("ready-to-implement", "readiness.md must check \"- [x] Ready to implement\" before %s", name)
	}
	if name != EvCompleted {
		return viol
	}
	if missing := MissingGates(p, rd.Text); len(missing) > 0 {
		v("completion-gates", "readiness.md does not check these completion gates: %s", strings.Join(missing, "; "))
	}
	problems, err := ConclusionProblems(folder, p)
	if err != nil {
		v("conclusion", "%v", err)
	}
	for _, pr := range problems {
		v("conclusion", "%s", pr)
	}
	return viol
}
