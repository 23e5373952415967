package protocol

// This file is the contract between protocol/ and its users (the CLI and
// fs/). Signatures here are stable; bodies are filled in by the protocol
// implementation.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrorKind separates lines that are not events at all from events that
// the state machine refuses; the filesystem maps them to EINVAL and EPERM.
type ErrorKind int

const (
	// Malformed: not one JSON object, wrong field types, missing fields,
	// invalid UTF-8, unknown event name.
	Malformed ErrorKind = iota + 1
	// Rejected: a well-formed event that the protocol refuses (wrong phase,
	// wrong participant, seq gap, time going backwards, bad reply_to,
	// sha256 mismatch, readiness gate...).
	Rejected
	// Unavailable: the folder itself is unusable (missing or invalid
	// protocol.json, unreadable events.jsonl, I/O error).
	Unavailable
)

// Error is the one error type returned for a refused append. Rule is a
// short stable identifier (for example "seq-continuous", "phase",
// "from-mismatch") that names the rule that refused the line.
type Error struct {
	Kind ErrorKind
	Line int    // 1-based line number in events.jsonl the event would have had, 0 if unknown
	Seq  int    // seq of the offending event, 0 if unknown
	Rule string // stable rule identifier
	Msg  string // one human sentence, no trailing period
}

func (e *Error) Error() string {
	switch {
	case e.Seq > 0:
		return fmt.Sprintf("events.jsonl line %d: seq %d: %s [%s]", e.Line, e.Seq, e.Msg, e.Rule)
	case e.Line > 0:
		return fmt.Sprintf("events.jsonl line %d: %s [%s]", e.Line, e.Msg, e.Rule)
	default:
		return fmt.Sprintf("%s [%s]", e.Msg, e.Rule)
	}
}

// KindOf returns the kind of a protocol error, or Unavailable for any other
// non-nil error.
func KindOf(err error) ErrorKind {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return Unavailable
}

// RuleOf returns the rule an *Error names, or "".
func RuleOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Rule
	}
	return ""
}

// Snapshot is the derived collaboration state after the last applied event.
type Snapshot struct {
	Phase      string   // "" before initialized
	Owner      string   // proposal owner
	WaitingFor []string // sorted as the reference sorts it
	LastSeq    int
	LastAt     string
	// Frozen maps folder-relative paths (slash-separated, e.g.
	// "deliverables/design-spec.md") of frozen deliverables to the SHA-256
	// recorded by their deliverable_frozen event. External-mode
	// deliverables outside the folder are keyed by their absolute path.
	Frozen map[string]string
}

// Log owns one collaboration folder's events.jsonl and protocol.json for a
// long-lived process. It keeps the derived state in memory and catches up
// incrementally with lines other processes appended, so an append costs
// the same at event 10 and at event 100,000.
//
// All appends, from any process, are serialized by an exclusive flock on
// the folder's LockFile (see LockFile). A line is written with a single write(2) at the true end of
// the file; protocol.json is then replaced atomically (temp file, fsync,
// rename), before the append returns or, after DeferProtocolWrites, in the
// background. A refused append changes no byte of either file.
type Log struct {
	mu sync.Mutex
	// ex tells readers holding mu that a writer of this process holds
	// the folder's exclusive lock (see exclusive).
	ex     exclusive
	folder string
	now    func() time.Time

	proto      *Protocol
	protoID    fileID
	protoData  []byte // protocol.json as it is, or will be once pw writes it
	rules      *rules
	needReplay bool
	pw         protoWriter

	state  core
	seen   seqSet
	offset int64 // bytes of events.jsonl consumed (complete lines only)
	lines  int   // lines consumed
	evID   fileID

	historyBad      *Violation // first problem of the history, nil when clean
	historyProblems int
	scratch         record   // reused by replays
	stepped         core     // likewise: the state after the line being applied
	intern          interner // participant ids seen in the history

	replica Replica // the authority when several hosts serve the folder
	// verified: bytes of events.jsonl known to equal the replica's history
	verified int64

	resolvedFolder string
	frozenKeys     map[string]string // doc reference -> Snapshot.Frozen key
	closed         bool
	// held keeps the lock file and events.jsonl open between locks,
	// used by one writer of this process at a time (turn).
	held  heldFiles
	turn  heldTurn
	fresh atomic.Pointer[upToDate]
}

// OpenLog loads protocol.json and replays events.jsonl. Invalid history is
// not fatal: state is derived as far as possible and Validate reports it.
func OpenLog(folder string) (*Log, error) { return OpenLogCached(folder, "") }

// Folder returns the collaboration folder.
func (l *Log) Folder() string { return l.folder }

// AppendLine validates one complete event line (without its trailing
// newline) written by participant and, if it is accepted, appends it and
// updates protocol.json. If participant is non-empty the event's "from"
// must equal it. The line is written as given followed by "\n": a final
// "\r" (a CRLF line end) is accepted and kept, and so are fields the
// schema does not define. The returned error is an *Error.
func (l *Log) AppendLine(line []byte, participant string) (Event, error) {
	return l.AppendLineRecorded(line, participant, nil)
}

// AppendLineRecorded is AppendLine with a hook that runs once the line is
// accepted and before it is written, under the log's lock. If record
// fails the line is not written and the error (of kind Unavailable, rule
// "record") says why. A caller that must account for every line (the
// ledger of a view) records the acceptance there, so that no crash can
// leave a line on disk without its record.
func (l *Log) AppendLineRecorded(line []byte, participant string, record func(Event) error) (Event, error) {
	return l.AppendLineRecordedContext(context.Background(), line, participant, record)
}

// AppendLineRecordedContext is AppendLineRecorded that stops waiting for
// the folder's lock when ctx is done (a view's request interrupted by a
// signal of its caller): the error then has rule RuleInterrupted and
// nothing is written.
func (l *Log) AppendLineRecordedContext(ctx context.Context, line []byte, participant string, record func(Event) error) (Event, error) {
	return l.appendLocked(ctx, func(f *os.File) (Event, error) {
		return l.commitRetryLocked(f, func() []byte { return line }, participant, record)
	})
}

// appendLocked runs commit with the cross-process lock and the log's
// mutex held, the state caught up; f is the locked events.jsonl.
func (l *Log) appendLocked(ctx context.Context, commit func(f *os.File) (Event, error)) (Event, error) {
	lk, err := l.lock(ctx)
	if err != nil {
		return Event{}, err
	}
	defer l.unlock(lk)
	return commit(lk.File())
}

// lock takes the folder's exclusive lock, then the log's mutex, and
// catches up with the folder under both. The lock is waited for without
// the mutex, so that nothing that only reads the state (a view's
// .acpfs/status, Refresh, Snapshot, another view's listing) waits behind
// a writer that waits for a stuck holder: a status read once waited
// behind every append queued before it. Every holder of the exclusive
// lock in this process takes it before the mutex, never the other way
// round, and a reader that waits for the shared lock under the mutex
// stops waiting when one of them holds it (see sharedLockLocked). On
// success the caller releases both with unlock.
func (l *Log) lock(ctx context.Context) (*Lock, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, unavailable("closed", "the log of %s is closed", l.folder)
	}
	if _, err := os.Lstat(filepath.Join(l.folder, ProtocolFile)); err != nil {
		// Checked first so that a folder without protocol.json does not
		// get an events.jsonl created by the lock.
		defer l.mu.Unlock()
		return nil, l.loadProtocolLocked()
	}
	l.mu.Unlock()
	lk, err := l.lockHeld(ctx)
	if errors.Is(err, ErrLockBusy) {
		return nil, lockBusy()
	}
	if errors.Is(err, ErrLockInterrupted) {
		return nil, unavailable(RuleInterrupted, "interrupted while waiting for the folder's lock %s; nothing was written", LockFile)
	}
	if err != nil {
		return nil, unavailable("events-lock", "%v", err)
	}
	l.ex.take()
	l.mu.Lock()
	l.fresh.Store(nil) // what follows changes the state
	if l.closed {
		l.unlock(lk)
		return nil, unavailable("closed", "the log of %s is closed", l.folder)
	}
	if err := l.catchUpLocked(lk.File(), true); err != nil {
		l.unlock(lk)
		return nil, err
	}
	return lk, nil
}

// unlock releases what lock took.
func (l *Log) unlock(lk *Lock) {
	l.ex.release()
	l.mu.Unlock()
	lk.Unlock()
	l.turn.release()
}

// lockHeld takes the folder's exclusive lock through the files the log
// keeps open, once no other writer of this process uses them: a flock
// on a descriptor another goroutine holds locked would not wait.
func (l *Log) lockHeld(ctx context.Context) (*Lock, error) {
	if err := l.turn.take(ctx, lockTimeout); err != nil {
		return nil, err
	}
	lk, err := l.held.lock(ctx, l.folder)
	if err != nil {
		l.turn.release()
		return nil, err
	}
	return lk, nil
}

// EventSpec is the caller's part of an event that Append builds: who
// writes it and its fields; Append adds the seq and the time. Empty
// optional fields are left out of the line, as the reference omits them.
type EventSpec struct {
	Participant string // the event's "from"; it must be listed in protocol.json
	Event       string
	Summary     string
	Doc         string
	ReplyTo     *int
	Role        string
	SHA256      string
}

// Append builds an event as the reference append script does (next seq,
// current UTC time, optional fields omitted when empty) and appends it
// through the same path as AppendLine.
func (l *Log) Append(spec EventSpec) (Event, error) {
	return l.appendLocked(context.Background(), func(f *os.File) (Event, error) {
		mk := func() []byte { return encodeLine(l.newEventLocked(spec)) }
		return l.commitRetryLocked(f, mk, spec.Participant, nil)
	})
}

// Refresh catches up with lines appended by other processes. It is cheap
// when nothing changed: two lstats, without the log's lock, which the
// views of a daemon share (every open for writing refreshes).
func (l *Log) Refresh() error {
	if l.current() != nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return unavailable("closed", "the log of %s is closed", l.folder)
	}
	return l.refreshLocked()
}

// FrozenNow is Snapshot().Frozen after a Refresh, without copying it: the
// map is shared and must not be modified. The error is the Refresh's;
// the map is then the state as far as it got.
func (l *Log) FrozenNow() (map[string]string, error) {
	if u := l.current(); u != nil {
		return u.frozen, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.snapshotLocked().Frozen, unavailable("closed", "the log of %s is closed", l.folder)
	}
	err := l.refreshLocked()
	if u := l.fresh.Load(); u != nil && err == nil {
		return u.frozen, nil
	}
	return l.snapshotLocked().Frozen, err
}

// upToDate is the state a refresh found caught up with the files: the
// files it saw, and what Refresh's callers ask of the state then.
// Published under the log's lock at the end of a refresh, read without
// it; any path that changes the state unpublishes it first.
type upToDate struct {
	ev, proto fileID
	frozen    map[string]string // Snapshot().Frozen; never modified
}

// current returns the published state when events.jsonl and
// protocol.json are still the files it was derived from, else nil.
func (l *Log) current() *upToDate {
	u := l.fresh.Load()
	if u == nil {
		return nil
	}
	ev, ok := lstatID(filepath.Join(l.folder, EventsFile))
	if !ok || ev != u.ev {
		return nil
	}
	if pj, ok := lstatID(filepath.Join(l.folder, ProtocolFile)); !ok || pj != u.proto {
		return nil
	}
	return u
}

// lstatID identifies the file at path (not following a symlink).
func lstatID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}, true
}

// publishFreshLocked publishes the state as caught up with the files last
// seen, unless a replay is due.
func (l *Log) publishFreshLocked() {
	if l.closed || l.needReplay || l.proto == nil {
		l.fresh.Store(nil)
		return
	}
	l.fresh.Store(&upToDate{ev: l.evID, proto: l.protoID, frozen: l.snapshotLocked().Frozen})
}

// Snapshot returns the current derived state (after a Refresh).
func (l *Log) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

// CheckProtocolWrite decides whether content may replace protocol.json:
// it must be a JSON object whose currentPhase, proposalOwner and
// waitingFor equal the derived state and whose other fields, except
// updatedAt, equal the current file's.
func (l *Log) CheckProtocolWrite(content []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return unavailable("closed", "the log of %s is closed", l.folder)
	}
	if err := l.refreshLocked(); err != nil {
		return err
	}
	return l.checkProtocolWriteLocked(content)
}

// Close writes protocol.json if a deferred write is pending and releases
// the log's resources.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	l.stopWriter()
	err := l.flushProtocol()
	l.mu.Lock()
	l.closed = true
	l.fresh.Store(nil)
	l.mu.Unlock()
	// A writer that holds the kept files gives them back once it sees
	// the log closed.
	if l.turn.take(context.Background(), lockTimeout) == nil {
		l.held.close()
		l.turn.release()
	}
	return err
}

// Event is one line of events.jsonl. Field order is the order in which the
// reference scripts write them, so lines written by either are identical.
type Event struct {
	Seq     int    `json:"seq"`
	From    string `json:"from"`
	Event   string `json:"event"`
	At      string `json:"at"`
	Summary string `json:"summary"`
	Doc     string `json:"doc,omitempty"`
	ReplyTo *int   `json:"reply_to,omitempty"`
	Role    string `json:"role,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// Terminal reports whether phase ends the collaboration.
func Terminal(phase string) bool { return phase == PhaseCompleted || phase == PhaseBlocked }

// Ready reports whether participant has the turn: it is waited for, or the
// collaboration has ended. reason is a short human explanation.
func Ready(s Snapshot, participant string) (ready bool, reason string) {
	return turnReady(s, participant)
}

// NextAction returns what next_action prints for participant: phase,
// proposal owner, waiting list, last event and the next action line.
func NextAction(folder, participant string) (string, error) {
	l, err := OpenLog(folder)
	if err != nil {
		return "", err
	}
	defer l.Close()
	st, err := l.Status(participant)
	if err != nil {
		return "", err
	}
	return st.String(), nil
}

// Result is the outcome of validating a whole folder.
type Result struct {
	Errors   []string
	Warnings []string
}

// ExitCode is 0 (passed), 1 (passed with warnings) or 2 (failed).
func (r Result) ExitCode() int {
	switch {
	case len(r.Errors) > 0:
		return 2
	case len(r.Warnings) > 0:
		return 1
	}
	return 0
}

// Validate checks a whole collaboration folder as the reference validator
// does.
func Validate(folder string) Result { return validateFolder(folder) }

// HistoryProblem describes the first problem of events.jsonl as replayed,
// or returns "" for a clean history. While there is one, every append is
// refused as Unavailable.
func (l *Log) HistoryProblem() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.historyBad == nil {
		return ""
	}
	h := l.historyBad
	return fmt.Sprintf("%d problem(s), first at line %d: %s [%s]", l.historyProblems, h.Line, h.Msg, h.Rule)
}
