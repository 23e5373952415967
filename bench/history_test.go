package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/protocol"
)

// The histories are owned by "server" and reviewed by "reader". After the
// opening events (initialized, draft, proposal, review, revision) the
// phase is decision_review, and the owner alternating question_classified
// (even seq) and decision_proposed (odd seq) stays valid forever, so a
// history of any length is written directly, without replaying it.
const (
	histOwner    = "server"
	histReviewer = "reader"
	histPrimary  = "deliverables/design-spec.md"
)

// cycleEvent is the event with the given seq in the endless part.
func cycleEvent(seq int) string {
	if seq%2 == 0 {
		return "question_classified"
	}
	return "decision_proposed"
}

// eventLine is the compact JSON line of event seq (no newline).
func eventLine(seq int, at time.Time) []byte {
	ev := map[string]any{
		"seq": seq, "from": histOwner, "event": cycleEvent(seq), "at": at.UTC().Format("2006-01-02T15:04:05Z"),
		"summary": "benchmark step", "reply_to": seq - 1,
	}
	b, _ := json.Marshal(ev)
	return b
}

// history is a collaboration folder with a known number of events.
type history struct {
	folder string
	next   int // seq of the next event
}

// newHistory writes a valid collaboration folder holding n events (n ≥ 6)
// under parent. The events are dated in the past, one second apart, so
// that appends stamped with the current time are never earlier. The last
// event goes through protocol.Log so that protocol.json matches the
// history, and the log's replay proves the history valid.
func newHistory(tb testing.TB, parent string, n int, participants ...string) *history {
	tb.Helper()
	require.GreaterOrEqual(tb, n, 6)
	if len(participants) == 0 {
		participants = []string{histOwner, histReviewer}
	}
	folder := filepath.Join(parent, fmt.Sprintf("collab-%d", n))
	start := time.Now().Add(-time.Duration(n+3600) * time.Second).UTC().Truncate(time.Second)
	_, err := protocol.Init(protocol.InitOptions{
		Folder: folder, Participants: participants, Objective: "Measure acpfs",
		Completion: []string{"Figures recorded"}, PrimaryType: "design-spec", Now: start,
	})
	require.NoError(tb, err)
	f, err := os.OpenFile(filepath.Join(folder, "events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(tb, err)
	w := bufio.NewWriterSize(f, 1<<20)
	at := func(seq int) string {
		return start.Add(time.Duration(seq) * time.Second).Format("2006-01-02T15:04:05Z")
	}
	// Every participant but the owner reviews the proposal: the phase
	// moves on once all of them have.
	opening := []map[string]any{
		{"from": histOwner, "event": "deliverable_drafted", "doc": histPrimary, "role": "primary"},
		{"from": histOwner, "event": "proposal_submitted", "doc": "proposal.md"},
	}
	for _, p := range participants {
		if p != histOwner {
			opening = append(opening, map[string]any{"from": p, "event": "review_submitted", "doc": "review.md"})
		}
	}
	opening = append(opening, map[string]any{"from": histOwner, "event": "proposal_revised", "doc": "proposal.md"})
	require.Greater(tb, n, len(opening)+1)
	for i, ev := range opening {
		seq := i + 2
		ev["seq"], ev["at"], ev["summary"], ev["reply_to"] = seq, at(seq), "benchmark setup", seq-1
		b, err := json.Marshal(ev)
		require.NoError(tb, err)
		w.Write(b)
		w.WriteByte('\n')
	}
	for seq := len(opening) + 2; seq < n; seq++ {
		w.Write(eventLine(seq, start.Add(time.Duration(seq)*time.Second)))
		w.WriteByte('\n')
	}
	require.NoError(tb, w.Flush())
	// On disk before anything is timed: the writeback of megabytes of
	// history would otherwise slow the first fsyncs of whatever comes
	// next, which a folder with a long history never pays.
	require.NoError(tb, f.Sync())
	require.NoError(tb, f.Close())

	l, err := protocol.OpenLog(folder)
	require.NoError(tb, err)
	defer l.Close()
	_, err = l.AppendLine(eventLine(n, time.Now()), histOwner)
	require.NoError(tb, err, "the generated history is invalid")
	require.Equal(tb, n, l.Snapshot().LastSeq)
	return &history{folder: folder, next: n + 1}
}

// line returns the next event line (with its newline) and advances.
func (h *history) line() []byte {
	b := append(eventLine(h.next, time.Now()), '\n')
	h.next++
	return b
}
