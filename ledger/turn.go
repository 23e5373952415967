package ledger

import (
	"encoding/json"
	"fmt"
)

// Turn is what a KindTurn record says of one turn of a participant that
// `acpfs drive` ran: the record's Agent and Grant name who, its SHA256 is
// the grant's hash, and its Detail is the Turn as compact JSON. The full
// receipt, with the lists this summary bounds, is in the run directory
// (File).
type Turn struct {
	ID          string   `json:"id"`   // seq-participant-attempt, unique per turn
	Wake        int      `json:"wake"` // the events.jsonl seq that woke the turn
	Attempt     int      `json:"attempt"`
	Participant string   `json:"participant"`
	PromptSHA   string   `json:"prompt_sha256"`
	Start       string   `json:"start"`
	End         string   `json:"end"`
	Exit        int      `json:"exit"`             // exit status (128+n for signal n); -1 unknown
	Signal      string   `json:"signal,omitempty"` // the signal that ended it, if one did
	Outcome     string   `json:"outcome"`          // appended, nothing_appended, timeout, interrupted, failed
	Events      []string `json:"events,omitempty"` // "seq type" of the events it appended
	Reads       []string `json:"reads,omitempty"`  // paths read
	Writes      []string `json:"writes,omitempty"` // paths written
	Refusals    []string `json:"refusals,omitempty"`
	Limits      []string `json:"limits,omitempty"` // limits it ran into (memory, pids, timeout ...)
	File        string   `json:"file,omitempty"`   // the receipt, relative to the run directory
}

// maxTurnList bounds each list a turn record carries: the receipt keeps
// them whole.
const maxTurnList = 32

// TurnRecord is the ledger record of t, for agent and grant (whose hash
// is grantSHA).
func TurnRecord(agent, grant, grantSHA string, t Turn) Record {
	clip := func(l []string) []string {
		if len(l) <= maxTurnList {
			return l
		}
		return append(l[:maxTurnList:maxTurnList], fmt.Sprintf("… %d more in the receipt", len(l)-maxTurnList))
	}
	t.Reads, t.Writes, t.Refusals = clip(t.Reads), clip(t.Writes), clip(t.Refusals)
	b, _ := json.Marshal(t) // plain strings and ints: cannot fail
	return Record{Kind: KindTurn, Agent: agent, Grant: grant, Op: OpTurn, SHA256: grantSHA, Detail: string(b)}
}

// ParseTurn decodes the Turn of a KindTurn record.
func ParseTurn(r Record) (Turn, error) {
	var t Turn
	if r.Kind != KindTurn {
		return t, fmt.Errorf("ledger seq %d: a %s record, not a turn", r.Seq, r.Kind)
	}
	if err := json.Unmarshal([]byte(r.Detail), &t); err != nil {
		return t, fmt.Errorf("ledger seq %d: turn detail: %w", r.Seq, err)
	}
	return t, nil
}
