package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// stressSeconds is how long TestStressReadersSeeWholeLines runs
// (ACPFS_STRESS_SECONDS overrides it for the long runs of
// docs/threat-model.md; make test keeps it short).
func stressSeconds(t *testing.T) time.Duration {
	if s := os.Getenv("ACPFS_STRESS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "ACPFS_STRESS_SECONDS")
		return time.Duration(n) * time.Second
	}
	return 15 * time.Second
}

// stressWriters is how many writers race through the owner's view.
const stressWriters = 16

// TestStressReadersSeeWholeLines (issue 25, findings 2 and 3): while
// 16 writers append through the owner's view as fast as they can, readers
// of every view read events.jsonl (whole, and in small pieces up to its
// end) and open protocol.json, and listers list and stat the views. No
// read ever ends inside a line, and protocol.json is always there.
func TestStressReadersSeeWholeLines(t *testing.T) {
	r := newConcRig(t)
	up := r.up()
	own := r.owner()
	require.NoError(t, os.WriteFile(r.path(own, primary), []byte(designSpec("Draft")), 0o644))

	deadline := time.Now().Add(stressSeconds(t))
	st := &stressRun{r: r, running: func() bool { return time.Now().Before(deadline) && r.found() == "" }}
	wg := &st.wg
	// Writers: the owner's deliverable_drafted may be repeated while
	// drafting, so every writer has something to append; they race for
	// each seq, and losers are refused (EPERM) and try again.
	for w := 0; w < stressWriters; w++ {
		wg.Add(1)
		go st.writer(w)
	}
	// On every view a reader, and a tailer (even ones) or an opener.
	for i, a := range r.agents {
		wg.Add(2)
		go st.reader(a)
		if i%2 == 0 {
			go st.tailer(a)
		} else {
			go st.opener(a)
		}
	}
	wg.Add(1)
	go st.lister()
	accepted, reads, lines, opens := &st.accepted, &st.reads, &st.lines, &st.opens
	wg.Wait()
	require.Empty(t, r.found())
	t.Logf("%s, %d writers: %d appends accepted, %d whole reads of events.jsonl (%d lines), %d opens of protocol.json",
		stressSeconds(t), stressWriters, accepted.Load(), reads.Load(), lines.Load(), opens.Load())
	assert.Positive(t, accepted.Load())
	assert.Positive(t, opens.Load())
	require.NoError(t, up.Stop(), up.Output())
	pmRequireLedgerValid(t, r.ledger)
}

// stressRun is the load of TestStressReadersSeeWholeLines and what it
// counted.
type stressRun struct {
	r                             *concRig
	running                       func() bool
	wg                            sync.WaitGroup
	accepted, reads, lines, opens atomic.Int64
}

func (s *stressRun) fail(format string, args ...any) { s.r.problem(format, args...) }

// writer appends the owner's deliverable_drafted as fast as it can.
func (s *stressRun) writer(w int) {
	defer s.wg.Done()
	for i := 0; s.running(); i++ {
		if seq := s.r.appendEvent(s.r.owner(), "deliverable_drafted", fmt.Sprintf("draft %d.%d", w, i),
			map[string]any{"doc": primary, "role": "primary"}); seq > 0 {
			s.accepted.Add(1)
		}
	}
}

// reader reads events.jsonl whole and a few bytes at a time, and
// protocol.json, through agent's view.
func (s *stressRun) reader(a string) {
	defer s.wg.Done()
	small := make([]byte, 97)
	for s.running() {
		b, err := os.ReadFile(s.r.path(a, "events.jsonl"))
		if err != nil {
			s.fail("reader %s: events.jsonl: %v", a, err)
			return
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			s.fail("reader %s: events.jsonl ends inside a line: %q", a, pmTail(b))
			return
		}
		s.reads.Add(1)
		s.lines.Add(int64(bytes.Count(b, []byte("\n"))))
		if err := stressReadPieces(s.r.path(a, "events.jsonl"), small); err != nil {
			s.fail("reader %s: %v", a, err)
			return
		}
		pj, err := os.ReadFile(s.r.path(a, "protocol.json"))
		if err != nil {
			s.fail("reader %s: protocol.json: %v", a, err)
			return
		}
		if !json.Valid(pj) {
			s.fail("reader %s: protocol.json is not JSON: %q", a, pj)
			return
		}
		s.opens.Add(1)
	}
}

// tailer follows the end of events.jsonl on a descriptor it holds,
// where a line still being written would show.
func (s *stressRun) tailer(a string) {
	defer s.wg.Done()
	if err := stressTail(s.r.path(a, "events.jsonl"), s.running); err != nil {
		s.fail("tailer %s: %v", a, err)
	}
}

// opener opens protocol.json as fast as it can while appends replace it.
func (s *stressRun) opener(a string) {
	defer s.wg.Done()
	for s.running() {
		fd, err := unix.Open(s.r.path(a, "protocol.json"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.fail("opener %s: protocol.json: %v", a, err)
			return
		}
		unix.Close(fd)
		s.opens.Add(1)
	}
}

// lister lists and stats every view, which refreshes the kernel's
// entries while names are replaced.
func (s *stressRun) lister() {
	defer s.wg.Done()
	for s.running() {
		for _, a := range s.r.agents {
			if _, err := os.ReadDir(s.r.view[a]); err != nil {
				s.fail("lister %s: %v", a, err)
				return
			}
			var st unix.Stat_t
			if err := unix.Stat(s.r.path(a, "protocol.json"), &st); err != nil {
				s.fail("lister %s: stat protocol.json: %v", a, err)
				return
			}
		}
	}
}

// stressReadPieces reads the file a few bytes at a time to its end, as
// a program with a small buffer does, and checks that the pieces end at
// a newline when the read stops (what it saw is whole lines).
func stressReadPieces(p string, buf []byte) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	var all bytes.Buffer
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if n == 0 {
			break
		}
		all.Write(buf[:n])
	}
	if b := all.Bytes(); len(b) > 0 && b[len(b)-1] != '\n' {
		return fmt.Errorf("read in pieces, events.jsonl ends inside a line: %q", pmTail(b))
	}
	return nil
}

// stressTail reads events.jsonl from where its last read ended, on one
// descriptor, until running says stop. A read may end inside a line the
// next read completes; but whenever a read finds nothing more (the end
// of the file for now), what was read so far must end with a newline.
func stressTail(p string, running func() bool) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 64<<10)
	var off int64
	var tail []byte
	for running() {
		n, err := unix.Pread(fd, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", p, off, err)
		}
		if n == 0 {
			if len(tail) > 0 && tail[len(tail)-1] != '\n' {
				return fmt.Errorf("the end of the file at %d is inside a line: %q", off, tail)
			}
			continue
		}
		tail = append(tail[:0], buf[max(0, n-120):n]...)
		off += int64(n)
	}
	return nil
}
