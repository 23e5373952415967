package drive

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shown is what a turnOutput showed, as notes.
type shown struct{ typ, text string }

// feed runs input through a turnOutput with lim, in writes of chunk
// bytes, and returns its log, what it showed and its account.
func feed(t *testing.T, lim OutputLimits, input string, chunk int) (string, []shown, Output, *turnOutput) {
	t.Helper()
	var log bytes.Buffer
	var notes []shown
	o := newTurnOutput(lim, &log, func(typ, text string) { notes = append(notes, shown{typ, text}) })
	for in := []byte(input); len(in) > 0; {
		n := min(chunk, len(in))
		o.write(in[:n])
		in = in[n:]
	}
	st := o.close()
	require.NoError(t, o.logErr)
	return log.String(), notes, st, o
}

func linesOf(prefix string, n, width int) string {
	var b strings.Builder
	for i := range n {
		l := fmt.Sprintf("%s%06d", prefix, i)
		b.WriteString(l + strings.Repeat(".", max(0, width-len(l))) + "\n")
	}
	return b.String()
}

var leftOutHere = regexp.MustCompile(`\[acpfs drive: (\d+) bytes \((\d+) lines\) of output left out here`)

// TestTurnOutputBounded: whatever a turn prints, its log keeps at most
// its head and tail (plus the marks), over-long lines are cut with a
// mark and reading goes on after them, and the account says what was
// left out, to the byte.
func TestTurnOutputBounded(t *testing.T) {
	small := OutputLimits{LogHead: 4 << 10, LogTail: 4 << 10, LogLine: 1 << 10, ShowLine: 64, ShowLines: 5, ShowBytes: 1 << 20}
	longLine := strings.Repeat("x", 5<<20)
	tests := []struct {
		name   string
		input  string
		in     []string // in the log, in this order
		notIn  []string
		output Output
	}{
		{"a few lines, kept whole", "one\ntwo\n", []string{"one\ntwo\n"}, nil,
			Output{Bytes: 8, Lines: 2}},
		{"no newline at the end", "one\ntwo", []string{"one\ntwo\n"}, nil,
			Output{Bytes: 7, Lines: 2}},
		{"a 5 MiB line without a newline, then more", "BEFORE\n" + longLine + "\nAFTER\nstderr line\n",
			[]string{"BEFORE\n", strings.Repeat("x", 1<<10) + " … [acpfs drive: " + strconv.Itoa(5<<20-1<<10) + " more bytes of this line left out]\n", "AFTER\nstderr line\n"}, nil,
			Output{Bytes: 7 + 5<<20 + 1 + 18, Lines: 4, Cut: true, LeftOut: 5<<20 - 1<<10, LongLines: 1, NotShown: 0}},
		{"a 5 MiB last line", "BEFORE\n" + longLine,
			[]string{"BEFORE\n", " more bytes of this line left out]\n"}, nil,
			Output{Bytes: 7 + 5<<20, Lines: 2, Cut: true, LeftOut: 5<<20 - 1<<10, LongLines: 1}},
		{"more lines than head and tail hold", linesOf("L", 2000, 31),
			[]string{"L000000", "L000100", "bytes (", "L001999"}, []string{"L001000"},
			Output{Bytes: 2000 * 32, Lines: 2000, Cut: true, LeftOut: 2000*32 - 2*(4<<10), NotShown: 1995}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1 << 16, 7} {
			if chunk == 7 && len(tt.input) > 1<<16 {
				continue // byte by byte is for the small inputs
			}
			t.Run(fmt.Sprintf("%s/writes of %d", tt.name, chunk), func(t *testing.T) {
				log, _, st, _ := feed(t, small, tt.input, chunk)
				at := 0
				for _, want := range tt.in {
					i := strings.Index(log[at:], want)
					require.GreaterOrEqual(t, i, 0, "%q not in the log after byte %d", want, at)
					at += i + len(want)
				}
				for _, not := range tt.notIn {
					assert.NotContains(t, log, not)
				}
				assert.LessOrEqual(t, len(log), int(small.LogHead+small.LogTail)+512, "the log is bounded")
				assert.Equal(t, tt.output, st)
				if m := leftOutHere.FindStringSubmatch(log); m != nil {
					assert.Equal(t, strconv.FormatInt(st.LeftOut, 10), m[1], "the mark says what the account says")
				}
			})
		}
	}
}

// TestTurnOutputShown: the coordinator's output shows the first lines
// of a turn, each cut to ShowLine bytes without splitting a character,
// says once that it shows no more, and leaves acpfs run's cgroup v1
// note to the log.
func TestTurnOutputShown(t *testing.T) {
	lim := OutputLimits{ShowLine: 8, ShowLines: 3}
	input := "short\n" + cgroupV1Note + " socket buffers\n" + "ééééé-long\n" + "third\n" + "fourth\n" + "fifth\n"
	log, notes, st, _ := feed(t, lim, input, 1<<16)
	assert.Equal(t, input, log, "the log keeps every line")
	assert.Equal(t, []shown{
		{NoteOutput, "short"},
		{NoteOutput, "éééé … [7 more bytes]"},
		{NoteOutput, "third"},
		{NoteInfo, "this turn printed more than 3 lines or 262144 bytes: the rest is not shown here (the turn's log keeps it, bounded)"},
	}, notes)
	assert.Equal(t, int64(2), st.NotShown)
	assert.False(t, st.Cut)
}

// TestTurnOutputLimitLine: acpfs run's last line naming a limit is
// kept for the receipt, a command's line that only contains the words
// is not.
func TestTurnOutputLimitLine(t *testing.T) {
	_, _, _, o := feed(t, OutputLimits{}, "echo: ran into its pids limit\nacpfs run: the command ran into its memory limit (exit status 137)\nbye\n", 1<<16)
	assert.Equal(t, "acpfs run: the command ran into its memory limit (exit status 137)", o.limit)
}

// TestTurnOutputDrainsToTheEnd: a writer of a 5 MiB line without a
// newline, then more, through a pipe, is read to its end: it never
// meets a closed pipe (EPIPE, or SIGPIPE for a command).
func TestTurnOutputDrainsToTheEnd(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte("BEFORE\n" + strings.Repeat("y", 5<<20)))
		if err == nil {
			_, err = w.Write([]byte("\nAFTER\n"))
		}
		w.Close()
		wrote <- err
	}()
	var log bytes.Buffer
	o := newTurnOutput(OutputLimits{}, &log, func(string, string) {})
	st := o.drain(r)
	require.NoError(t, <-wrote)
	assert.Equal(t, int64(7+5<<20+7), st.Bytes)
	assert.True(t, strings.HasSuffix(log.String(), "left out]\nAFTER\n"), "the lines after the long one are kept")
}
