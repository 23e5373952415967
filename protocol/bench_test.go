package protocol

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchCycle is a loop of events that stays valid forever in phase
// decision_review with participants server (owner) and reader, starting
// right after question_classified: reader accepts, the owner proposes a
// new decision and classifies the questions again.
var benchCycle = []struct{ from, event, doc string }{
	{"reader", EvDecisionAccepted, DecisionsFile},
	{"server", EvDecisionProposed, ProposalFile},
	{"server", EvQuestionClassified, ReadinessFile},
}

func benchLine(seq int, at time.Time) []byte {
	c := benchCycle[(seq-7)%len(benchCycle)]
	return encodeLine(Event{Seq: seq, From: c.from, Event: c.event, At: FormatTime(at), Summary: "benchmark step", Doc: c.doc, ReplyTo: intp(seq - 1)})
}

// benchFolder builds a valid folder holding n events: the happy path up
// to question_classified (6 events), then benchCycle, written directly.
// protocol.json and review.md are brought in line so that it validates.
func benchFolder(b testing.TB, n int) string {
	b.Helper()
	k := newKit(b, kitOptions(filepath.Join(b.TempDir(), "c"), "design-spec"))
	for _, s := range k.happySteps()[:5] {
		s()
	}
	f, err := os.OpenFile(filepath.Join(k.dir, EventsFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(b, err)
	w := bufio.NewWriterSize(f, 1<<20)
	for seq := 7; seq <= n; seq++ {
		w.Write(benchLine(seq, kitEpoch.Add(time.Hour+time.Duration(seq)*time.Second)))
		w.WriteByte('\n')
	}
	require.NoError(b, w.Flush())
	require.NoError(b, f.Close())
	l, err := OpenLog(k.dir)
	require.NoError(b, err)
	require.Nil(b, l.historyBad)
	require.NoError(b, l.writeProtocolLocked(&l.state))
	return k.dir
}

// BenchmarkLogAppend measures one AppendLine (lock, catch-up check,
// parse, state machine, document checks, write, protocol.json rewrite)
// at several history sizes; the cost must not grow with the history.
func BenchmarkLogAppend(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		for _, deferred := range []bool{false, true} {
			name := fmt.Sprintf("events=%dk", n/1000)
			if deferred {
				// As a daemon appends: protocol.json written in the
				// background (DeferProtocolWrites).
				name += ",deferred"
			}
			b.Run(name, func(b *testing.B) { benchLogAppend(b, n, deferred) })
		}
	}
}

func benchLogAppend(b *testing.B, n int, deferred bool) {
	dir := benchFolder(b, n)
	l, err := OpenLog(dir)
	require.NoError(b, err)
	defer l.Close()
	if deferred {
		l.DeferProtocolWrites()
	}
	lines := make([][]byte, b.N)
	for i := range lines {
		seq := n + 1 + i
		lines[i] = benchLine(seq, kitEpoch.Add(time.Hour+time.Duration(seq)*time.Second))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.AppendLine(lines[i], ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidate measures a full validation of a 100,000-event folder.
func BenchmarkValidate(b *testing.B) {
	dir := benchFolder(b, 100_000)
	res := Validate(dir)
	require.Empty(b, res.Errors)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Validate(dir)
	}
}

// BenchmarkOpenLog measures the replay of a 5,000- and a 100,000-event
// history (what `acpfs append` pays on a folder it has not seen, and a
// daemon's start).
func BenchmarkOpenLog(b *testing.B) {
	for _, n := range []int{5_000, 100_000} {
		b.Run(fmt.Sprintf("events=%dk", n/1000), func(b *testing.B) {
			dir := benchFolder(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := OpenLog(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
