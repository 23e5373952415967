package view

import (
	"bytes"
	"os"
	"syscall"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// The operations of the run on events.jsonl and protocol.json: appends
// that follow the collaboration to its end (its deliverable frozen on
// the way), appends the protocol refuses, and protocol.json read and
// rewritten.

func (r *run) agentNamed(name string) *agent {
	for _, a := range r.agents {
		if a.name == name {
			return a
		}
	}
	r.failf("no agent %s", name)
	return nil
}

// gated steps need readiness.md (and decisions.md) as the
// classification left them, which an agent may have edited since.
func gated(event string) bool {
	return event == protocol.EvDecisionAccepted || event == protocol.EvReadinessPassed || event == protocol.EvCompleted
}

// prepWrites are the documents the preparation of step s writes on
// disk, as an agent's editor would.
func prepWrites(s acpStep) []string {
	var out []string
	switch s.event {
	case protocol.EvReviewSubmitted:
		out = append(out, protocol.ReviewFile)
	case protocol.EvDeliverableFrozen:
		out = append(out, primaryRef)
	case protocol.EvCompleted:
		out = append(out, protocol.ConclusionFile)
	}
	if s.event == protocol.EvQuestionClassified || gated(s.event) {
		out = append(out, protocol.DecisionsFile, protocol.ReadinessFile)
	}
	return out
}

// stepLine is the line of step s, its documents written first: each
// made a plain file again if an agent replaced it (a symlink saved over
// it), then written, and the model told.
func (r *run) stepLine(s acpStep) []byte {
	docs := prepWrites(s)
	for _, rel := range docs {
		if r.w.file(rel) != nil && r.w.file(rel).links == 1 {
			continue
		}
		if _, ok := r.w.entries[rel]; ok {
			if err := os.Remove(r.c.in(rel)); err != nil {
				r.failf("remove %s: %v", rel, err)
			}
			r.w.drop(rel)
		}
		r.c.write(rel, "# "+rel+"\n")
		r.w.newFile(rel, []byte("# "+rel+"\n"))
	}
	seq := bytes.Count(r.events, []byte("\n")) + 1
	if gated(s.event) {
		for _, qs := range r.steps {
			if qs.event == protocol.EvQuestionClassified {
				qs.prep(r.c, seq)
			}
		}
	}
	line := s.line(r.c, seq)
	for _, rel := range docs {
		r.w.file(rel).content = []byte(r.c.read(rel))
		r.w.touch(r.w.entries[rel].id)
	}
	return line
}

// openEvents opens events.jsonl for appending through a's view, as the
// contract says it may.
func (r *run) openEvents(a *agent) File {
	v := r.judge(a, oOpenWrite, protocol.EventsFile)
	fh, _, errno := a.view.Open(r.ctx, nil, protocol.EventsFile, syscall.O_WRONLY|syscall.O_APPEND)
	r.refused(a, errno, v, ledger.OpOpen, protocol.EventsFile)
	if errno != 0 {
		return nil
	}
	return fh
}

func (r *run) opAppend() {
	kind := r.ch.intn(8)
	if r.next >= len(r.steps) && kind < 5 {
		kind = 5 + r.ch.intn(3) // the collaboration ended: nothing valid left
	}
	switch kind {
	case 0, 1, 2, 3:
		r.appendValid()
	case 4:
		r.appendForged()
	default:
		r.appendRefused(kind - 2)
	}
}

// appendValid appends the next step of the collaboration through the
// view of the participant whose step it is: one write, two, or no
// newline (appended at close).
func (r *run) appendValid() {
	s := r.steps[r.next]
	a := r.agentNamed(s.from)
	how := r.ch.intn(3)
	r.note("%s append step %d %s (way %d)", a.name, r.next, s.event, how)
	line := r.stepLine(s)
	fh := r.openEvents(a)
	if fh == nil {
		return
	}
	var writes [][]byte
	switch how {
	case 0:
		writes = [][]byte{append(append([]byte(nil), line...), '\n')}
	case 1:
		writes = [][]byte{line[:len(line)/2], append(append([]byte(nil), line[len(line)/2:]...), '\n')}
	case 2:
		writes = [][]byte{line}
	}
	for _, w := range writes {
		if n, errno := fh.Write(r.ctx, w, 0); errno != 0 || int(n) != len(w) {
			r.failf("append of step %s by %s: %d of %d bytes, %v (%s)", s.event, a.name, n, len(w), errnoText(errno), a.view.LastError())
		}
	}
	if errno := fh.Flush(r.ctx); errno != 0 {
		r.failf("close after step %s by %s: %v (%s)", s.event, a.name, errnoText(errno), a.view.LastError())
	}
	fh.Release(r.ctx)
	if !has(r.since(), ledger.KindAppendAccepted, a.name, ledger.OpAppend, protocol.EventsFile) {
		r.failf("no append_accepted record of step %s by %s", s.event, a.name)
	}
	r.next++
	r.w.frozen = r.w.frozen || s.event == protocol.EvDeliverableFrozen
	r.events = append(append(r.events, line...), '\n')
	r.w.file(protocol.EventsFile).content = r.events
	r.w.touch(r.w.entries[protocol.EventsFile].id)
	// protocol.json is replaced (renamed over) by the append.
	r.w.drop(protocol.ProtocolFile)
	r.w.newFile(protocol.ProtocolFile, []byte(r.c.read(protocol.ProtocolFile)))
}

// appendForged appends the next step through the view of another agent
// than the participant it names: refused, whoever tries it.
func (r *run) appendForged() {
	s := r.steps[r.next]
	var others []*agent
	for _, a := range r.agents {
		if a.name != s.from {
			others = append(others, a)
		}
	}
	a := others[r.ch.intn(len(others))]
	r.note("%s append step %d %s as %s", a.name, r.next, s.event, s.from)
	line := r.stepLine(s)
	r.appendLine(a, append(line, '\n'), syscall.EPERM)
}

// appendRefused appends what the protocol refuses: a malformed line
// (3), a line already in the log (4), or a line cut off at close (5).
func (r *run) appendRefused(kind int) {
	a := r.pickAgent()
	switch kind {
	case 3:
		r.note("%s append a malformed line", a.name)
		r.appendLine(a, []byte("{not json\n"), syscall.EINVAL)
	case 4:
		first := r.events[:bytes.IndexByte(r.events, '\n')+1]
		r.note("%s append the first line again", a.name)
		r.appendLine(a, first, syscall.EPERM)
	default:
		r.note("%s append a line cut off at close", a.name)
		fh := r.openEvents(a)
		if fh == nil {
			return
		}
		if n, errno := fh.Write(r.ctx, []byte(`{"seq":99,"from":"`), 0); errno != 0 || n == 0 {
			r.failf("the start of a line by %s: %d bytes, %v", a.name, n, errnoText(errno))
		}
		errno := fh.Flush(r.ctx)
		fh.Release(r.ctx)
		r.refused(a, errno, mverdict{syscall.EINVAL, ledger.KindAppendRejected}, ledger.OpAppend, protocol.EventsFile)
	}
}

// appendLine appends line through a's view, which the protocol refuses
// with errno: recorded, and nothing changes on disk (checked after every
// operation).
func (r *run) appendLine(a *agent, line []byte, errno syscall.Errno) {
	fh := r.openEvents(a)
	if fh == nil {
		return
	}
	n, got := fh.Write(r.ctx, line, 0)
	if n != 0 {
		r.failf("a refused line by %s: %d bytes acknowledged", a.name, n)
	}
	r.refused(a, got, mverdict{errno, ledger.KindAppendRejected}, ledger.OpAppend, protocol.EventsFile)
	if e := fh.Flush(r.ctx); e != 0 {
		r.failf("close after a refused line by %s: %v", a.name, errnoText(e))
	}
	fh.Release(r.ctx)
}

// opProtocolJSON reads protocol.json, or rewrites it with what it holds
// (accepted) or with something else (refused at close).
func (r *run) opProtocolJSON() {
	a := r.pickAgent()
	rel := protocol.ProtocolFile
	switch r.ch.intn(3) {
	case 0:
		r.note("%s read %s", a.name, rel)
		fh, _, errno := a.view.Open(r.ctx, nil, rel, syscall.O_RDONLY)
		r.refused(a, errno, r.judge(a, oOpenRead, rel), ledger.OpOpen, rel)
		if errno != 0 {
			return
		}
		got, errno := fh.Read(r.ctx, make([]byte, 1<<16), 0)
		got = append([]byte(nil), got...)
		fh.Release(r.ctx)
		if want := r.c.read(rel); errno != 0 || string(got) != want {
			r.failf("read %s by %s: %q (%v), on disk %q", rel, a.name, got, errnoText(errno), want)
		}
		r.read(a, rel, got, true)
	case 1:
		r.note("%s rewrite %s as it is", a.name, rel)
		r.rewriteProtocol(a, []byte(r.c.read(rel)), mAllow)
	default:
		r.note("%s rewrite %s with other content", a.name, rel)
		r.rewriteProtocol(a, []byte(`{"acp":"mine"}`), mPerm)
	}
}

// rewriteProtocol writes data over protocol.json through a's view; v is
// the answer of its close.
func (r *run) rewriteProtocol(a *agent, data []byte, v mverdict) {
	rel := protocol.ProtocolFile
	fh, _, errno := a.view.Open(r.ctx, nil, rel, syscall.O_WRONLY|syscall.O_TRUNC)
	r.refused(a, errno, r.judge(a, oOpenWrite, rel), ledger.OpOpen, rel)
	if errno != 0 {
		return
	}
	if n, errno := fh.Write(r.ctx, data, 0); errno != 0 || int(n) != len(data) {
		r.failf("rewrite of %s by %s: %d bytes, %v", rel, a.name, n, errnoText(errno))
	}
	errno = fh.Flush(r.ctx)
	fh.Release(r.ctx)
	r.refused(a, errno, v, ledger.OpWrite, rel)
	if errno == 0 {
		r.wrote(a, ledger.OpRewrite, rel)
	}
}
