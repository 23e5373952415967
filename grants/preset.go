package grants

import (
	"fmt"
	"sort"
	"strings"

	"github.com/acpfs/acpfs/protocol"
)

// Preset names.
const (
	PresetOwner    = "owner"
	PresetReviewer = "reviewer"
)

// DefaultDeliverablesDir is the ACP deliverables directory when the
// protocol does not declare another.
const DefaultDeliverablesDir = "deliverables"

// RolePreset is the may_read / may_write pair of an ACP role.
type RolePreset struct {
	Name     string
	MayRead  []string
	MayWrite []string
}

// Presets lists the preset names.
func Presets() []string {
	names := []string{PresetOwner, PresetReviewer}
	sort.Strings(names)
	return names
}

// Preset returns the globs of an ACP role, so that a coordinator writes
// one line per agent. deliverablesDir is the folder-relative deliverables
// directory ("" for "deliverables"), or in external mode the directory
// beside the folder ("../docs": see the glob semantics); pass "-" when
// only the protocol files apply.
//
// Both roles read protocol.json, events.jsonl, the five protocol documents
// and the deliverables. The owner (proposal owner) writes events.jsonl,
// protocol.json, proposal.md, decisions.md, readiness.md, conclusion.md and
// the deliverables. A reviewer writes events.jsonl, protocol.json and
// review.md only: in the protocol, reviewers accept decisions through
// events and never edit decisions.md or readiness.md, which the owner
// classifies. protocol.json is writable because the reference scripts
// rewrite it after each event (acpfs accepts only the derived content).
func Preset(name, deliverablesDir string) (RolePreset, error) {
	var deliv string
	switch deliverablesDir {
	case "-":
	case "":
		deliv = DefaultDeliverablesDir + "/"
	default:
		rel, err := cleanUpRel(deliverablesDir)
		if err != nil {
			return RolePreset{}, fmt.Errorf("preset %s: deliverables directory %q: %w", name, deliverablesDir, err)
		}
		if rel == "" || strings.TrimLeft(rel, "./") == "" {
			return RolePreset{}, fmt.Errorf("preset %s: deliverables directory %q is the folder root or above it", name, deliverablesDir)
		}
		deliv = rel + "/"
	}
	read := append([]string{protocol.ProtocolFile, protocol.EventsFile}, protocol.ProtocolDocs()...)
	var write []string
	switch name {
	case PresetOwner:
		write = []string{protocol.EventsFile, protocol.ProtocolFile, protocol.ProposalFile, protocol.DecisionsFile, protocol.ReadinessFile, protocol.ConclusionFile}
	case PresetReviewer:
		write = []string{protocol.EventsFile, protocol.ProtocolFile, protocol.ReviewFile}
	default:
		return RolePreset{}, fmt.Errorf("unknown preset %q (known: %v)", name, Presets())
	}
	if deliv != "" {
		read = append(read, deliv)
		if name == PresetOwner {
			write = append(write, deliv)
		}
	}
	return RolePreset{Name: name, MayRead: read, MayWrite: write}, nil
}
