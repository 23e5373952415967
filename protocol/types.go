package protocol

import "sort"

// deliverableType describes a built-in deliverable type: its title, the
// default file name and the "## " sections it must contain.
type deliverableType struct {
	title    string
	file     string
	sections []string
}

// deliverableTypes are the built-in types of ACP schema v2. Their section
// names are part of the protocol: both implementations check them.
var deliverableTypes = map[string]deliverableType{
	"adr": {"Architecture Decision Record", "adr.md",
		[]string{"Status", "Context", "Decision", "Alternatives Considered", "Consequences", "Follow-ups"}},
	"design-spec": {"Design Spec", "design-spec.md",
		[]string{"Problem", "Goals", "Non-goals", "Proposed Design", "Interfaces / Contracts", "Failure Modes", "Validation Plan", "Open Questions"}},
	"implementation-plan": {"Implementation Plan", "implementation-plan.md",
		[]string{"Scope", "Phases", "Tasks", "Dependencies", "Rollout / Migration", "Tests", "Risks", "Exit Criteria"}},
	"decision-memo": {"Decision Memo", "decision-memo.md",
		[]string{"Question", "Recommendation", "Options", "Tradeoffs", "Decision", "Next Action"}},
	"review-report": {"Review Report", "review-report.md",
		[]string{"Scope", "Findings", "Risks", "Required Changes", "Open Questions", "Recommendation"}},
	"test-plan": {"Test Plan", "test-plan.md",
		[]string{"Scope", "Test Matrix", "Fixtures", "Automation", "Manual Tests", "Exit Criteria"}},
}

// CustomType is the deliverable type whose sections come from a checklist.
const CustomType = "custom"

// DeliverableTypes returns every deliverable type name, sorted, custom
// included.
func DeliverableTypes() []string {
	out := []string{CustomType}
	for k := range deliverableTypes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TypeSections returns the required sections of a built-in type.
func TypeSections(typ string) []string { return deliverableTypes[typ].sections }

func knownType(t string) bool {
	_, ok := deliverableTypes[t]
	return ok || t == CustomType
}

// DeliverableStatuses are the accepted values of a deliverable's
// "Status:" line.
var DeliverableStatuses = []string{"Draft", "In Review", "Frozen"}
