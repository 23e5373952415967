package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/pycompat"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// fileID identifies a version of a file cheaply: same inode, size and
// modification time means nothing to re-read.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

func idOf(fi os.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id
}

func unavailable(rule, format string, args ...any) *Error {
	return &Error{Kind: Unavailable, Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// loadProtocolLocked (re)reads protocol.json when it changed on disk. A
// change of anything but the fields appends rewrite invalidates the
// replayed state, which is then rebuilt.
func (l *Log) loadProtocolLocked() error {
	path := filepath.Join(l.folder, ProtocolFile)
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return unavailable("protocol-json", "missing protocol.json in %s", l.folder)
		}
		return unavailable("protocol-json", "cannot stat protocol.json: %v", err)
	}
	id := idOf(fi)
	if l.proto != nil && id == l.protoID {
		return nil
	}
	data, err := readNoFollow(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return unavailable("protocol-json", "missing protocol.json in %s", l.folder)
		}
		return unavailable("protocol-json", "cannot read protocol.json: %v", err)
	}
	p, err := ParseProtocol(data)
	if err != nil {
		return err
	}
	l.protoID = id
	l.protoData = data
	// Someone else wrote the file: a deferred write of ours rendered
	// before it must not replace it (see flushProtocol).
	l.pw.foreign++
	l.pw.reloaded = true
	if l.proto != nil && sameStatic(l.proto.Raw, p.Raw) {
		l.proto = p
		l.rules.proto = p
		return nil
	}
	l.proto = p
	l.rules = newRules(p)
	l.needReplay = true
	l.frozenKeys = nil
	return nil
}

// resetLocked forgets the replayed history.
func (l *Log) resetLocked() {
	l.state = core{}
	l.seen = seqSet{}
	l.offset = 0
	l.lines = 0
	l.historyBad = nil
	l.historyProblems = 0
	l.evID = fileID{}
	l.intern = interner{}
}

// catchUpLocked brings the in-memory state up to date with events.jsonl
// through f (an open descriptor of it). Only bytes after the consumed
// offset are parsed, unless the file was replaced, shrank, or no longer
// has a line end where the consumed part ended: then it is replayed.
//
// With a replica, lines past the part of the file known to equal the
// authority's history are applied only once the authority confirms them;
// exclusive (f is locked for writing) also cuts the first line it does
// not hold, and everything after it, so that the copy becomes the
// authority's history again (see verifyLocked).
func (l *Log) catchUpLocked(f *os.File, exclusive bool) error {
	if err := l.loadProtocolLocked(); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return unavailable("events-read", "cannot stat %s: %v", EventsFile, err)
	}
	id := idOf(fi)
	replay := l.needReplay || id.dev != l.evID.dev || id.ino != l.evID.ino || id.size < l.offset
	if !replay && l.offset > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], l.offset-1); err != nil || last[0] != '\n' {
			replay = true
		}
	}
	if replay {
		l.resetLocked()
		l.needReplay = false
		l.verified = 0 // rewritten in place or replaced: nothing is known
	}
	l.evID = id
	defer l.afterCatchUpLocked()
	if id.size == l.offset {
		return nil
	}
	var unconfirmed [][]byte
	err = forEachLine(io.NewSectionReader(f, l.offset, id.size-l.offset), func(line []byte, complete bool) {
		if !complete {
			return // a line still being written, or a torn one: not consumed
		}
		if l.replica != nil && (len(unconfirmed) > 0 || l.offset >= l.verified) {
			unconfirmed = append(unconfirmed, bytes.Clone(line))
			return
		}
		l.offset += int64(len(line) + 1)
		l.lines++
		l.applyHistoryLocked(line, l.lines)
	})
	if err != nil {
		return unavailable("events-read", "cannot read %s: %v", EventsFile, err)
	}
	if len(unconfirmed) > 0 {
		return l.verifyLocked(f, unconfirmed, exclusive)
	}
	return nil
}

// verifyLocked applies the lines of the copy that the authority holds at
// the same numbers, in order, and stops at the first one it does not:
// a line written to the copy without the store (by a backing-side
// writer, or a tool that does not use the store) must not become part of
// this host's history, or two hosts would hold different lines N. When
// exclusive, that line and the rest are cut from the copy; the
// authority's own lines then come with the next pull.
func (l *Log) verifyLocked(f *os.File, lines [][]byte, exclusive bool) error {
	auth, err := l.replica.Since(l.lines)
	if err != nil {
		return unavailable(RuleStore, "cannot check %s against the store: %v", EventsFile, err)
	}
	for i, line := range lines {
		if i >= len(auth) || !bytes.Equal(line, auth[i]) {
			if !exclusive {
				return nil // applied as far as confirmed; cut by the next appender
			}
			slog.Warn("lines written to the copy without the store were removed",
				"file", filepath.Join(l.folder, EventsFile), "from_line", l.lines+1, "lines", len(lines)-i)
			if err := f.Truncate(l.offset); err != nil {
				l.needReplay = true
				return unavailable("io", "cut %s back to the store's history: %v", EventsFile, err)
			}
			if fi, err := f.Stat(); err == nil {
				l.evID = idOf(fi)
			}
			return nil
		}
		l.offset += int64(len(line) + 1)
		l.lines++
		l.verified = l.offset
		l.applyHistoryLocked(line, l.lines)
	}
	return nil
}

// applyHistoryLocked applies one line that is already in the file. The
// state follows it even when it breaks rules (as the validator does), and
// the first problem is remembered: new appends are refused until the
// history is repaired.
func (l *Log) applyHistoryLocked(line []byte, lineNo int) {
	if pycompat.IsBlank(line) && utf8.Valid(line) {
		return
	}
	rec := &l.scratch
	parseLineInto(rec, line, lineNo, l.intern)
	problems := rec.bad
	if rec.object {
		problems = append(problems, stepInto(l.rules, &l.state, &l.seen, rec, &l.stepped)...)
		l.state = l.stepped
		if rec.has.has(fSeq) {
			l.seen.add(rec.Seq)
		}
	}
	if len(problems) > 0 {
		l.historyProblems += len(problems)
		if l.historyBad == nil {
			p := problems[0]
			l.historyBad = &p
		}
	}
}

// refuse turns a violation into the error returned to the caller.
func refuse(v Violation) error { return v.asError() }

// commitLocked checks line as the next event and, if it is accepted,
// records it, publishes it to the replica when there is one, and writes
// it and protocol.json. f is the locked events.jsonl and the state is
// caught up with it.
func (l *Log) commitLocked(f *os.File, line []byte, participant string, record func(Event) error) (Event, error) {
	lineNo := l.lines + 1
	rec, next, err := l.admitLocked(f, line, lineNo, participant)
	if err != nil {
		return Event{}, err
	}
	if record != nil {
		if err := record(rec.Event); err != nil {
			return Event{}, &Error{Kind: Unavailable, Line: lineNo, Seq: rec.Seq, Rule: RuleRecord,
				Msg: fmt.Sprintf("the event was valid but could not be recorded, so it was not appended: %v", err)}
		}
	}
	if l.replica != nil {
		if err := l.publishLocked(f, lineNo, line); err != nil {
			return Event{}, err
		}
	}
	if err := l.writeEventLocked(f, line, lineNo, rec.Seq, &next); err != nil {
		return Event{}, err
	}
	return rec.Event, nil
}

// admitLocked decides whether line may be appended as event lineNo: the
// file must end with a whole line and its history be sound, the event be
// well formed, from participant (when set) and a listed participant, and
// pass the state machine and the document checks. It returns the event
// and the state after it.
func (l *Log) admitLocked(f *os.File, line []byte, lineNo int, participant string) (*record, core, error) {
	if l.replica != nil {
		if err := l.cutTailLocked(f); err != nil {
			return nil, core{}, err
		}
	}
	if l.evID.size != l.offset {
		return nil, core{}, &Error{Kind: Unavailable, Line: l.lines + 1, Rule: "partial-line",
			Msg: fmt.Sprintf("%s ends with an incomplete line (no newline after byte %d); repair it before appending", EventsFile, l.offset)}
	}
	rec := parseLine(line, lineNo)
	if len(rec.bad) > 0 {
		return nil, core{}, refuse(rec.bad[0])
	}
	seq := rec.Seq
	if participant != "" && rec.From != participant {
		return nil, core{}, &Error{Kind: Rejected, Line: lineNo, Seq: seq, Rule: "from-mismatch",
			Msg: fmt.Sprintf("from is %q but this writer is %q", rec.From, participant)}
	}
	if l.historyBad != nil {
		h := l.historyBad
		return nil, core{}, &Error{Kind: Unavailable, Line: lineNo, Seq: seq, Rule: "history",
			Msg: fmt.Sprintf("%s has %d problem(s), first at line %d: %s [%s]; repair it before appending", EventsFile, l.historyProblems, h.Line, h.Msg, h.Rule)}
	}
	if !l.rules.listed[rec.From] {
		return nil, core{}, &Error{Kind: Rejected, Line: lineNo, Seq: seq, Rule: "participant",
			Msg: fmt.Sprintf("%q is not a participant listed in protocol.json", rec.From)}
	}
	viol, next := step(l.rules, &l.state, &l.seen, rec)
	if len(viol) > 0 {
		return nil, core{}, refuse(viol[0])
	}
	if viol := docChecks(l.folder, l.proto, rec); len(viol) > 0 {
		return nil, core{}, refuse(viol[0])
	}
	return rec, next, nil
}

// writeEventLocked appends the admitted line to events.jsonl, then writes
// (or, with deferred writes, renders) protocol.json from next, undoing the
// line when either fails, and makes next the log's state.
func (l *Log) writeEventLocked(f *os.File, line []byte, lineNo, seq int, next *core) error {
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	n, err := f.Write(buf)
	if err != nil || n != len(buf) {
		l.undoLocked(f)
		if err == nil {
			err = io.ErrShortWrite
		}
		return &Error{Kind: Unavailable, Line: lineNo, Seq: seq, Rule: "io", Msg: fmt.Sprintf("write %s: %v", EventsFile, err)}
	}
	if next.Phase != "" {
		var err error
		if l.pw.on {
			// Views serve the new content from memory at once; the file
			// follows off the critical path (see deferred.go).
			l.renderProtocolLocked(next, l.now())
			l.markDirtyLocked()
		} else {
			err = l.writeProtocolLocked(next)
		}
		if err != nil {
			l.undoLocked(f)
			return &Error{Kind: Unavailable, Line: lineNo, Seq: seq, Rule: "io", Msg: fmt.Sprintf("write %s: %v", ProtocolFile, err)}
		}
	}
	l.state = *next
	l.seen.add(seq)
	l.offset += int64(len(buf))
	l.verified = l.offset // published first when there is a replica
	l.lines++
	if fi, err := f.Stat(); err == nil {
		l.evID = idOf(fi)
	} else {
		l.evID.size = l.offset
	}
	return nil
}

// undoLocked removes a partially written line so that a failed append
// leaves events.jsonl as it was.
func (l *Log) undoLocked(f *os.File) {
	if err := f.Truncate(l.offset); err != nil {
		l.needReplay = true
	}
}

// writeProtocolLocked replaces protocol.json atomically with the derived
// fields of next.
func (l *Log) writeProtocolLocked(next *core) error {
	l.renderProtocolLocked(next, l.now())
	data, err := l.protocolDataLocked()
	if err != nil {
		return err
	}
	path := filepath.Join(l.folder, ProtocolFile)
	if err := writeFileAtomic(path, data); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil {
		l.protoID = idOf(fi)
	}
	// Whatever was pending is superseded by this newer content.
	l.pw.dirty = false
	return nil
}

// renderProtocolLocked makes the in-memory protocol.json (l.proto.Raw)
// state the derived fields of next, stamped at. Its bytes are made when
// first needed (protocolDataLocked): a burst of appends encodes once.
func (l *Log) renderProtocolLocked(next *core, at time.Time) {
	raw := make(map[string]any, len(l.proto.Raw)+4)
	for k, v := range l.proto.Raw {
		raw[k] = v
	}
	raw["currentPhase"] = next.Phase
	if next.OwnerSet {
		raw["proposalOwner"] = next.Owner
	} else {
		raw["proposalOwner"] = nil
	}
	waiting := make([]any, len(next.Waiting))
	for i, w := range next.Waiting {
		waiting[i] = w
	}
	raw["waitingFor"] = waiting
	raw["updatedAt"] = FormatTime(at)
	l.proto.Raw = raw
	l.protoData = nil
	l.pw.gen++
}

// protocolDataLocked returns the bytes of the in-memory protocol.json.
func (l *Log) protocolDataLocked() ([]byte, error) {
	if l.protoData == nil {
		data, err := pycompat.MarshalIndent(l.proto.Raw)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", ProtocolFile, err)
		}
		l.protoData = data
	}
	return l.protoData, nil
}

// writeFileAtomic replaces path with data by the rule of
// internal/atomicfile, keeping the mode of the file it replaces.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, atomicfile.PermOf(path, 0o644))
}

// newEventLocked builds the event Append writes: the next seq and the
// current time, never earlier than the previous event.
func (l *Log) newEventLocked(spec EventSpec) Event {
	return Event{
		Seq:     l.state.Count + 1,
		From:    spec.Participant,
		Event:   spec.Event,
		At:      eventTime(l.now(), l.state.LastAt, l.state.LastAtOK),
		Summary: spec.Summary,
		Doc:     spec.Doc,
		ReplyTo: spec.ReplyTo,
		Role:    spec.Role,
		SHA256:  spec.SHA256,
	}
}

// snapshotLocked renders the derived state.
func (l *Log) snapshotLocked() Snapshot {
	s := Snapshot{
		Phase:      l.state.Phase,
		Owner:      l.state.Owner,
		WaitingFor: append([]string{}, l.state.Waiting...),
		LastSeq:    l.state.LastSeq,
		LastAt:     l.state.LastAtStr,
		Frozen:     map[string]string{},
	}
	for doc, sum := range l.state.Frozen {
		s.Frozen[l.frozenKey(doc)] = sum
	}
	return s
}

// frozenKey maps a deliverable doc reference to the path the filesystem
// protects: folder-relative and slash-separated, or absolute when an
// external deliverable lies outside the folder.
func (l *Log) frozenKey(doc string) string {
	if !l.proto.external || !strings.HasPrefix(doc, "external:") {
		return doc
	}
	if key, ok := l.frozenKeys[doc]; ok {
		return key
	}
	key := l.resolveFrozenKey(doc)
	if l.frozenKeys == nil {
		l.frozenKeys = map[string]string{}
	}
	l.frozenKeys[doc] = key
	return key
}

func (l *Log) resolveFrozenKey(doc string) string {
	path, err := l.proto.DeliverablePath(l.folder, strings.TrimPrefix(doc, "external:"))
	if err != nil {
		return doc
	}
	if l.resolvedFolder == "" {
		l.resolvedFolder = resolvePath(l.folder)
	}
	if rel, err := filepath.Rel(l.resolvedFolder, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.ToSlash(rel)
	}
	return path
}

// refreshLocked catches up with other writers when the files changed.
func (l *Log) refreshLocked() (err error) {
	l.fresh.Store(nil) // published again once caught up
	path := filepath.Join(l.folder, EventsFile)
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if l.offset > 0 || l.lines > 0 {
				l.resetLocked()
			}
			return l.loadProtocolLocked()
		}
		return unavailable("events-read", "cannot stat %s: %v", EventsFile, err)
	}
	if pfi, err := os.Lstat(filepath.Join(l.folder, ProtocolFile)); err == nil && idOf(pfi) == l.protoID && idOf(fi) == l.evID && !l.needReplay {
		l.publishFreshLocked()
		return nil
	}
	defer func() {
		if err == nil {
			l.publishFreshLocked()
		}
	}()
	release, err := l.sharedLockLocked()
	if err != nil {
		return lockBusy()
	}
	if release != nil {
		defer release()
	}
	f, err := atomicfile.OpenFile(path, syscall.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return unavailable("events-read", "open %s: %v", EventsFile, err)
	}
	defer f.Close()
	return l.catchUpLocked(f, false)
}

// checkProtocolWriteLocked accepts content for protocol.json only if it
// states the derived phase, owner and waiting list and changes nothing
// else but updatedAt.
func (l *Log) checkProtocolWriteLocked(content []byte) error {
	bad := func(format string, args ...any) error {
		return &Error{Kind: Rejected, Rule: "protocol-json", Msg: fmt.Sprintf(format, args...)}
	}
	v, err := pycompat.Decode(content)
	if err != nil {
		return bad("the new protocol.json is not valid JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return bad("the new protocol.json is not a JSON object")
	}
	want := map[string]any{}
	if l.state.Phase != "" {
		want["currentPhase"] = l.state.Phase
		if l.state.OwnerSet {
			want["proposalOwner"] = l.state.Owner
		} else {
			want["proposalOwner"] = nil
		}
		waiting := make([]any, len(l.state.Waiting))
		for i, w := range l.state.Waiting {
			waiting[i] = w
		}
		want["waitingFor"] = waiting
	} else {
		for _, k := range []string{"currentPhase", "proposalOwner", "waitingFor"} {
			if val, ok := l.proto.Raw[k]; ok {
				want[k] = val
			}
		}
	}
	for _, k := range []string{"currentPhase", "proposalOwner", "waitingFor"} {
		w, wok := want[k]
		got, gok := m[k]
		if wok != gok || (wok && !pycompat.Equal(w, got)) {
			return bad("%s would be %s but the events give %s; protocol.json is derived from events.jsonl", k, pyRepr(got), pyRepr(w))
		}
	}
	if !sameStatic(l.proto.Raw, m) {
		for k := range mergeKeys(l.proto.Raw, m) {
			if dynamicFields[k] {
				continue
			}
			a, aok := l.proto.Raw[k]
			b, bok := m[k]
			if aok != bok || !pycompat.Equal(a, b) {
				return bad("the write changes %s; only currentPhase, proposalOwner, waitingFor and updatedAt may change", k)
			}
		}
	}
	return nil
}

func mergeKeys(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
