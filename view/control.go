package view

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// ControlFile is one read-only file of the control directory. Gen makes
// its content at the first read (wait's blocks until the agent's turn).
type ControlFile struct {
	Name string
	Gen  func(ctx context.Context) ([]byte, syscall.Errno)
	// Listed: shown in a listing of .acpfs. wait is not, since its reads
	// block: globs and recursive tools (cat .acpfs/*, grep -r) must
	// never open it.
	Listed bool
}

// ControlFiles are the files of .acpfs, in the order of their inode
// numbers.
func (f *View) ControlFiles() []ControlFile {
	return []ControlFile{
		{Name: "status", Gen: f.statusText, Listed: true},
		{Name: "grant.md", Gen: func(context.Context) ([]byte, syscall.Errno) {
			return []byte(grants.Render(f.Grant())), 0
		}, Listed: true},
		{Name: "last-error", Gen: func(context.Context) ([]byte, syscall.Errno) { return []byte(f.LastError()), 0 }, Listed: true},
		{Name: "wait", Gen: f.waitTurn},
	}
}

// RefuseControl refuses, and records, a change op of rel in .acpfs.
func (f *View) RefuseControl(ctx context.Context, op ledger.Op, rel string) syscall.Errno {
	return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, ".acpfs is read-only")
}

// OpenControl judges an open of the control file rel: for reading only.
func (f *View) OpenControl(ctx context.Context, rel string, flags uint32) syscall.Errno {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return f.RefuseControl(ctx, ledger.OpOpen, rel)
	}
	return 0
}

// statusText is .acpfs/status: who this agent is and where the
// collaboration stands.
func (f *View) statusText(ctx context.Context) ([]byte, syscall.Errno) {
	if err := f.log.Refresh(); err != nil {
		return []byte(fmt.Sprintf("error: %v\n", err)), 0
	}
	s := f.log.Snapshot()
	g := f.Grant()
	me := g.ParticipantID()
	ready, reason := protocol.Ready(s, me)
	var b strings.Builder
	fmt.Fprintf(&b, "agent: %s\ngrant: %s\nparticipant: %s\n", g.AgentID, g.GrantID, me)
	fmt.Fprintf(&b, "phase: %s\nproposal owner: %s\nwaiting for: %s\n", orNone(s.Phase), orNone(s.Owner), orNone(strings.Join(s.WaitingFor, ", ")))
	fmt.Fprintf(&b, "last seq: %d\n", s.LastSeq)
	if p := f.log.HistoryProblem(); p != "" {
		fmt.Fprintf(&b, "history: broken, every append fails with EIO until it is repaired (%s)\n", p)
	}
	b.WriteString(f.quotaText())
	if f.ledger.Failing() {
		b.WriteString("ledger: cannot be written (disk full or immutable), every operation fails with EIO until it can\n")
	} else if br := f.ledger.Broken(); br != nil {
		fmt.Fprintf(&b, "ledger: stopped, every recorded operation fails with EIO until an operator repairs it (%s)\n", br.Reason)
	} else {
		b.WriteString("ledger: recording\n")
	}
	if f.gate != nil {
		if err := f.gate(); err != nil {
			fmt.Fprintf(&b, "writes: refused with EROFS, reads go on (%v)\n", err)
		} else {
			b.WriteString("writes: open\n")
		}
	}
	turn := "no"
	if ready {
		turn = "yes"
	}
	fmt.Fprintf(&b, "your turn: %s (%s)\n", turn, reason)
	if st, err := f.log.Status(me); err == nil {
		fmt.Fprintf(&b, "next action: %s\n", strings.TrimRight(st.Action, "\n"))
	}
	return []byte(b.String()), 0
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// waitTurn blocks until this agent is waited for or the collaboration has
// ended, then returns the next action. Appends through any mount of this
// daemon wake it at once; the periodic re-check covers appends made by
// other processes between two notifications.
func (f *View) waitTurn(ctx context.Context) ([]byte, syscall.Errno) {
	me := f.participant()
	for {
		ch := f.turnChan()
		if err := f.log.Refresh(); err != nil {
			return nil, syscall.EIO
		}
		if ready, reason := protocol.Ready(f.log.Snapshot(), me); ready {
			// The live log, not a fresh replay: its cost must not grow
			// with the history.
			next := ""
			if st, err := f.log.Status(me); err == nil {
				next = st.String()
			} else {
				next = fmt.Sprintf("error: %v\n", err)
			}
			return []byte("ready: " + reason + "\n" + next), 0
		}
		select {
		case <-ctx.Done():
			return nil, syscall.EINTR
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// A handed-over artifact is shown exactly as it was handed over: reads
// come from the content-addressed copy, never from the live file the
// producer may have changed since.

// SnapshotAttr is the attributes of the handed-over copy src: a
// read-only regular file.
func SnapshotAttr(src string) (unix.Stat_t, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return st, errnoOf(err)
	}
	st.Mode = syscall.S_IFREG | 0o444
	return st, 0
}

// RefuseSnapshot refuses, and records, a change op of the handed-over
// artifact rel.
func (f *View) RefuseSnapshot(ctx context.Context, op ledger.Op, rel string) syscall.Errno {
	return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "a handed-over artifact is read-only")
}

// OpenSnapshot opens the handed-over copy src of rel for reading.
func (f *View) OpenSnapshot(ctx context.Context, rel, src string, flags uint32) (File, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, f.RefuseSnapshot(ctx, ledger.OpOpen, rel)
	}
	// The artifact lives in the coordinator's run directory; a symlink
	// in its place is never followed.
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errnoOf(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	if _, errno := f.recordReadOf(ctx, rel, fd, versionOf(&st), "handoff snapshot"); errno != 0 {
		unix.Close(fd)
		return nil, errno
	}
	h := f.newHandle(fd, rel, nil)
	h.passthrough = !f.auditReads && f.passthrough
	return f.track(h), 0
}
