package drive

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"
)

// OutputLimits bound what a turn's output costs the coordinator: an
// agent chooses how much it prints, and the run directory that holds
// its log also holds the ledger, which every view needs to write.
type OutputLimits struct {
	// LogHead and LogTail are the bytes of the turn's log kept from the
	// start and from the end of its output; what lies between is left
	// out, with a line saying how much.
	LogHead, LogTail int64
	// LogLine is the longest line the log keeps whole; a longer one keeps
	// its first LogLine bytes and says how many more it had.
	LogLine int
	// ShowLine, ShowLines and ShowBytes bound what of a turn's output the
	// coordinator's own output shows: the longest line, the lines and
	// the bytes per turn.
	ShowLine  int
	ShowLines int
	ShowBytes int64
}

// DefaultOutputLimits are the limits of a drive whose Options give none.
var DefaultOutputLimits = OutputLimits{
	LogHead: 4 << 20, LogTail: 4 << 20, LogLine: 64 << 10,
	ShowLine: 1 << 10, ShowLines: 1000, ShowBytes: 256 << 10,
}

// orDefault fills the limits left zero from DefaultOutputLimits.
func (l OutputLimits) orDefault() OutputLimits {
	d := DefaultOutputLimits
	pick := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	l.LogHead, l.LogTail, l.ShowBytes = pick(l.LogHead, d.LogHead), pick(l.LogTail, d.LogTail), pick(l.ShowBytes, d.ShowBytes)
	l.LogLine = int(pick(int64(l.LogLine), int64(d.LogLine)))
	l.ShowLine = int(pick(int64(l.ShowLine), int64(d.ShowLine)))
	l.ShowLines = int(pick(int64(l.ShowLines), int64(d.ShowLines)))
	// A line the log keeps must fit in its head, and a line shown is a
	// prefix of the line kept.
	l.LogLine = int(min(int64(l.LogLine), l.LogHead))
	l.ShowLine = min(l.ShowLine, l.LogLine)
	return l
}

// Output is what a turn printed (its command and acpfs run, one stream)
// and how much of it the turn's log and the coordinator's output hold.
type Output struct {
	Bytes int64 `json:"bytes"`
	Lines int64 `json:"lines"`
	// Cut is set when the log does not hold all of it: LeftOut bytes are
	// missing, from over-long lines (LongLines of them) and from the
	// middle of the output.
	Cut       bool  `json:"cut"`
	LeftOut   int64 `json:"left_out,omitempty"`
	LongLines int64 `json:"long_lines,omitempty"`
	// NotShown are the lines the coordinator's output did not show.
	NotShown int64 `json:"not_shown,omitempty"`
}

// cmdRunPrefix begins the lines acpfs run prints itself.
const cmdRunPrefix = "acpfs run: "

// cgroupV1Note begins acpfs run's cgroup v1 note, which says the same
// every turn: the turn's log keeps it, the coordinator's output does
// not show it.
const cgroupV1Note = cmdRunPrefix + "cgroup v1:"

// turnOutput takes a turn's output as it comes, whatever its shape (a
// line of any length, no newline at all, binary), and keeps a bounded
// log of it, shows a bounded part of it, and notes acpfs run's limit
// line. It never refuses bytes: the agent is never stopped or killed
// for what it prints.
type turnOutput struct {
	lim  OutputLimits
	log  *bufio.Writer
	show func(typ, text string) // a note for the coordinator's output
	st   Output

	line []byte // the current line, its first LogLine bytes
	over int64  // the bytes of the current line beyond those
	text []byte // the line as the log keeps it, reused

	headBytes int64 // written to the log's head
	tailing   bool  // the head is full: lines go to tail
	tail      tailRing
	cut       int64 // bytes cut from over-long lines, all of them

	shownLines int
	shownBytes int64
	logErr     error
	limit      string // acpfs run's last line naming a limit
}

func newTurnOutput(lim OutputLimits, log io.Writer, show func(typ, text string)) *turnOutput {
	lim = lim.orDefault()
	return &turnOutput{lim: lim, log: bufio.NewWriterSize(log, 64<<10), show: show,
		line: make([]byte, 0, min(lim.LogLine, 4<<10)), tail: tailRing{max: lim.LogTail}}
}

// drain reads r to its end (every writer gone), then closes the
// output: it never stops reading while the command may still write.
func (o *turnOutput) drain(r io.Reader) Output {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		o.write(buf[:n])
		// Lines written so far reach the log as they come, for whoever
		// follows it.
		o.flush()
		if err != nil {
			break
		}
	}
	return o.close()
}

// write takes the next bytes of the output.
func (o *turnOutput) write(p []byte) {
	o.st.Bytes += int64(len(p))
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.take(p)
			return
		}
		o.take(p[:i])
		o.endLine(true)
		p = p[i+1:]
	}
}

// take adds b to the current line, keeping its first LogLine bytes.
func (o *turnOutput) take(b []byte) {
	room := min(o.lim.LogLine-len(o.line), len(b))
	o.line = append(o.line, b[:room]...)
	o.over += int64(len(b) - room)
}

// endLine logs and shows the current line, which ended with a newline
// or with the output.
func (o *turnOutput) endLine(newline bool) {
	o.st.Lines++
	keep := o.line
	if o.over > 0 {
		// Cut from a longer line: no rune split at the cut.
		keep = o.line[:lastFull(o.line, len(o.line))]
	}
	nl := int64(0)
	if newline {
		nl = 1
	}
	raw := int64(len(o.line)) + o.over + nl
	cut := raw - int64(len(keep)) - nl
	o.text = append(o.text[:0], keep...)
	if cut > 0 {
		o.text = fmt.Appendf(o.text, " … [acpfs drive: %d more bytes of this line left out]", cut)
		o.st.LongLines++
		o.cut += cut
	}
	o.text = append(o.text, '\n')
	o.logLine(o.text, raw, cut)
	o.showLine(keep, cut)
	if bytes.HasPrefix(keep, []byte(cmdRunPrefix)) && limitLine().Match(keep) {
		o.limit = string(keep)
	}
	o.line, o.over = o.line[:0], 0
}

// logLine puts a line into the log's head while it has room, else into
// its tail; raw is the line's length in the output, cut the bytes the
// log leaves out of it.
func (o *turnOutput) logLine(text []byte, raw, cut int64) {
	if !o.tailing && o.headBytes+int64(len(text)) <= o.lim.LogHead {
		o.headBytes += int64(len(text))
		o.logWrite(text)
		return
	}
	o.tailing = true
	o.tail.add(text, raw, cut)
}

func (o *turnOutput) logWrite(b []byte) {
	if o.logErr != nil {
		return
	}
	if _, err := o.log.Write(b); err != nil {
		o.logErr = err
	}
}

func (o *turnOutput) flush() {
	if o.logErr == nil {
		o.logErr = o.log.Flush()
	}
}

// showLine shows a line, its first ShowLine bytes, while the turn has
// lines and bytes left to show; cut is what the line lost already.
func (o *turnOutput) showLine(keep []byte, cut int64) {
	if bytes.HasPrefix(keep, []byte(cgroupV1Note)) {
		return
	}
	if o.shownLines >= o.lim.ShowLines || o.shownBytes >= o.lim.ShowBytes {
		o.st.NotShown++
		if o.st.NotShown == 1 {
			o.show(NoteInfo, fmt.Sprintf("this turn printed more than %d lines or %d bytes: the rest is not shown here (the turn's log keeps it, bounded)", o.lim.ShowLines, o.lim.ShowBytes))
		}
		return
	}
	n := runeCut(keep, o.lim.ShowLine)
	text := string(keep[:n])
	if left := cut + int64(len(keep)-n); left > 0 {
		text += fmt.Sprintf(" … [%d more bytes]", left)
	}
	o.shownLines++
	o.shownBytes += int64(len(text))
	o.show(NoteOutput, text)
}

// close ends the last line, writes the tail after a line saying what
// was left out between it and the head, and says what the log holds.
func (o *turnOutput) close() Output {
	if len(o.line) > 0 || o.over > 0 {
		o.endLine(false)
	}
	if o.tail.droppedRaw > 0 {
		o.logWrite(fmt.Appendf(nil, "[acpfs drive: %d bytes (%d lines) of output left out here: the log keeps the first %d and the last %d bytes]\n",
			o.tail.droppedRaw, o.tail.droppedLines, o.lim.LogHead, o.lim.LogTail))
	}
	o.logWrite(o.tail.bytes())
	o.flush()
	o.st.LeftOut = o.tail.droppedRaw + o.cut - o.tail.droppedCut
	o.st.Cut = o.st.LeftOut > 0
	return o.st
}

// runeCut is the largest length up to n at which b may be cut without
// splitting a UTF-8 sequence.
func runeCut(b []byte, n int) int {
	if n >= len(b) {
		return len(b)
	}
	return lastFull(b, n)
}

// lastFull is n, or the start of the rune b[:n] ends in the middle of.
func lastFull(b []byte, n int) int {
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:n]) {
				return i
			}
			return n
		}
	}
	return n
}

// tailRing keeps the last whole lines of the output, up to max bytes of
// the log's text.
type tailRing struct {
	max   int64
	buf   []byte // buf[start:] are the lines kept
	start int
	base  int64 // the position of buf[0] in the text given to add
	// odd are the lines kept whose text is not their bytes in the output
	// (cut, or the last one without a newline): a few at most, as each
	// is a line of LogLine bytes or the last.
	odd []oddLine

	droppedRaw, droppedLines, droppedCut int64
}

// oddLine is a line of the ring whose text (ending at end) differs from
// its bytes in the output: raw of them, cut left out.
type oddLine struct{ end, raw, cut int64 }

// add keeps the line text (raw bytes in the output, cut of them left
// out), dropping the oldest lines past max.
func (r *tailRing) add(text []byte, raw, cut int64) {
	r.buf = append(r.buf, text...)
	if raw != int64(len(text)) || cut > 0 {
		r.odd = append(r.odd, oddLine{end: r.base + int64(len(r.buf)), raw: raw, cut: cut})
	}
	for int64(len(r.buf)-r.start) > r.max {
		n := bytes.IndexByte(r.buf[r.start:], '\n') + 1
		end := r.base + int64(r.start+n)
		lineRaw, lineCut := int64(n), int64(0)
		if len(r.odd) > 0 && r.odd[0].end == end {
			lineRaw, lineCut = r.odd[0].raw, r.odd[0].cut
			r.odd = r.odd[1:]
		}
		r.droppedRaw += lineRaw
		r.droppedCut += lineCut
		r.droppedLines++
		r.start += n
	}
	// Move the kept lines to the front once the dropped ones are the
	// larger part: each byte is moved a bounded number of times.
	if r.start > len(r.buf)/2 && r.start >= 64<<10 {
		r.base += int64(r.start)
		r.buf = append(r.buf[:0], r.buf[r.start:]...)
		r.start = 0
	}
}

func (r *tailRing) bytes() []byte { return r.buf[r.start:] }
