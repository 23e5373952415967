package drive

import (
	"fmt"
	"sort"

	"github.com/acpfs/acpfs/protocol"
)

// State is what the loop decides from: the collaboration's derived state
// and what the driver knows of its turns.
type State struct {
	Phase   string
	Waiting []string
	LastSeq int
	// Running are the participants whose turn runs now.
	Running map[string]bool
	// Failures counts, per participant, its turns in a row that appended
	// no accepted event.
	Failures map[string]int
	// Stopping is set once a signal or the deadline asked the loop to end.
	Stopping bool
}

// Decision is what the loop does next.
type Decision struct {
	// Start are the participants to wake now, each with its attempt
	// number (1 for a first try).
	Start []Wake
	// GiveUp are waited-for participants whose retries are used up.
	GiveUp []string
	// Done is set when the loop ends once nothing runs any more; Reason
	// says why.
	Done   bool
	Reason string
}

// Wake is one turn to start.
type Wake struct {
	Participant string
	Seq         int // the seq that wakes it
	Attempt     int
}

// ID is the turn's identity: the seq that woke it, the participant and
// the attempt. A turn with an ID that has a receipt is never run again.
func (w Wake) ID() string { return fmt.Sprintf("%06d-%s-%d", w.Seq, w.Participant, w.Attempt) }

// Decide is the loop's rule. Every participant in waitingFor whose turn
// does not run and whose retries are not used up is started, several at
// once; one whose retries are used up is given up. The loop is done at a
// terminal phase, when asked to stop, or when it waits for nobody it can
// run; it ends only once no turn runs.
func Decide(s State, cfg *Config) Decision {
	var d Decision
	switch {
	case protocol.Terminal(s.Phase):
		d.Done, d.Reason = true, s.Phase
	case s.Stopping:
		d.Done, d.Reason = true, "stopped"
	}
	if d.Done {
		return d
	}
	waiting := append([]string(nil), s.Waiting...)
	sort.Strings(waiting)
	var undriven []string
	for _, id := range waiting {
		p := cfg.Participant(id)
		switch {
		case p == nil:
			undriven = append(undriven, id)
		case s.Running[id]:
		case s.Failures[id] > p.Retries:
			d.GiveUp = append(d.GiveUp, id)
		default:
			d.Start = append(d.Start, Wake{Participant: id, Seq: s.LastSeq, Attempt: s.Failures[id] + 1})
		}
	}
	if len(d.Start) == 0 && len(d.GiveUp) == 0 && len(s.Running) == 0 {
		d.Done = true
		if len(undriven) > 0 {
			d.Reason = fmt.Sprintf("waiting for %v, whom the collaboration file does not drive", undriven)
		} else {
			d.Reason = fmt.Sprintf("phase %s waits for nobody", s.Phase)
		}
	}
	return d
}
