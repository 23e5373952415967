package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/acpfs/acpfs/internal/digest"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// A derived-state checkpoint lets a short-lived process (`acpfs append`,
// one process per event) skip the replay of the whole history: it stores
// the state the replay of events.jsonl up to some offset gave, and is
// used only while events.jsonl is still the file it describes:
//
//   - the same file (device and inode),
//   - at least as long, and ending at the checkpoint's offset with the
//     very line the checkpoint last applied (compared byte for byte),
//   - under a protocol.json whose static declaration (everything the
//     appends do not rewrite) has the same hash.
//
// A file rewritten in place with the same length and the same last line
// would pass; a long-lived Log trusts its consumed prefix the same way
// (it checks one byte). The lines after the offset are applied as usual,
// so a checkpoint written by one process serves after appends of any
// other. Only clean histories are checkpointed: a broken one is replayed,
// which finds its first problem again.
//
// The checkpoint is written where only its writer's user may write (the
// user's cache directory, see DefaultCheckpointPath): whoever could forge
// one could make the log accept an event the history forbids.

// checkpointVersion changes whenever the checkpointed state changes shape.
const checkpointVersion = 1

type checkpointFile struct {
	Version    int            `json:"version"`
	Folder     string         `json:"folder"`
	Static     string         `json:"static"` // SHA-256 of protocol.json's static declaration
	Dev        uint64         `json:"dev"`
	Ino        uint64         `json:"ino"`
	Offset     int64          `json:"offset"`
	Lines      int            `json:"lines"`
	LastLine   []byte         `json:"last_line"` // with its newline
	State      checkpointCore `json:"state"`
	Contiguous int            `json:"contiguous"`
	Extra      []int          `json:"extra,omitempty"`
}

// checkpointCore mirrors core field by field (TestCheckpointCoversCore
// keeps them in step).
type checkpointCore struct {
	Count                  int               `json:"count"`
	Phase                  string            `json:"phase"`
	Owner                  string            `json:"owner"`
	OwnerSet               bool              `json:"owner_set"`
	Waiting                []string          `json:"waiting"`
	ReviewWaiting          []string          `json:"review_waiting"`
	AcceptWaiting          []string          `json:"accept_waiting"`
	AcceptedRound          []string          `json:"accepted_round"`
	ClassificationSeq      int               `json:"classification_seq"`
	LatestDecisionInputSeq int               `json:"latest_decision_input_seq"`
	ReadinessPassed        bool              `json:"readiness_passed"`
	PrimaryDrafted         bool              `json:"primary_drafted"`
	PrimaryFrozen          bool              `json:"primary_frozen"`
	LastSeq                int               `json:"last_seq"`
	LastAt                 time.Time         `json:"last_at"`
	LastAtOK               bool              `json:"last_at_ok"`
	LastAtStr              string            `json:"last_at_str"`
	Frozen                 map[string]string `json:"frozen"`
	HasDecisionAccepted    bool              `json:"has_decision_accepted"`
	HasReadinessPassed     bool              `json:"has_readiness_passed"`
	HasCompleted           bool              `json:"has_completed"`
	HasPrimaryFrozenEvent  bool              `json:"has_primary_frozen_event"`
	Last                   checkpointEvent   `json:"last"`
	ProposalSubmitted      *checkpointEvent  `json:"proposal_submitted"`
	ProposalRevised        *checkpointEvent  `json:"proposal_revised"`
	LastReviewSubmitted    *checkpointEvent  `json:"last_review_submitted"`
}

type checkpointEvent struct {
	Seq    int    `json:"seq"`
	SeqOK  bool   `json:"seq_ok"`
	Name   string `json:"name"`
	From   string `json:"from"`
	FromOK bool   `json:"from_ok"`
}

// coreOut is the checkpoint form of c.
func coreOut(c *core) checkpointCore {
	var cp checkpointCore
	exchange(c, &cp, true)
	return cp
}

// coreIn is the state a checkpoint holds.
func coreIn(cp *checkpointCore) core {
	var c core
	exchange(&c, cp, false)
	return c
}

// exchange copies every field of c to cp (out) or back. One list serves
// both directions, so that no field is saved without being restored.
func exchange(c *core, cp *checkpointCore, out bool) {
	move(out, &c.count, &cp.Count)
	move(out, &c.phase, &cp.Phase)
	move(out, &c.owner, &cp.Owner)
	move(out, &c.ownerSet, &cp.OwnerSet)
	move(out, &c.waiting, &cp.Waiting)
	move(out, &c.reviewWaiting, &cp.ReviewWaiting)
	move(out, &c.acceptWaiting, &cp.AcceptWaiting)
	move(out, &c.acceptedRound, &cp.AcceptedRound)
	move(out, &c.classificationSeq, &cp.ClassificationSeq)
	move(out, &c.latestDecisionInputSeq, &cp.LatestDecisionInputSeq)
	move(out, &c.readinessPassed, &cp.ReadinessPassed)
	move(out, &c.primaryDrafted, &cp.PrimaryDrafted)
	move(out, &c.primaryFrozen, &cp.PrimaryFrozen)
	move(out, &c.lastSeq, &cp.LastSeq)
	move(out, &c.lastAt, &cp.LastAt)
	move(out, &c.lastAtOK, &cp.LastAtOK)
	move(out, &c.lastAtStr, &cp.LastAtStr)
	move(out, &c.frozen, &cp.Frozen)
	move(out, &c.hasDecisionAccepted, &cp.HasDecisionAccepted)
	move(out, &c.hasReadinessPassed, &cp.HasReadinessPassed)
	move(out, &c.hasCompleted, &cp.HasCompleted)
	move(out, &c.hasPrimaryFrozenEvent, &cp.HasPrimaryFrozenEvent)
	if out {
		cp.Last = *eventOut(&c.last)
		cp.ProposalSubmitted, cp.ProposalRevised = eventOut(c.proposalSubmitted), eventOut(c.proposalRevised)
		cp.LastReviewSubmitted = eventOut(c.lastReviewSubmitted)
	} else {
		c.last = *eventIn(&cp.Last)
		c.proposalSubmitted, c.proposalRevised = eventIn(cp.ProposalSubmitted), eventIn(cp.ProposalRevised)
		c.lastReviewSubmitted = eventIn(cp.LastReviewSubmitted)
	}
}

func eventOut(e *lastEvent) *checkpointEvent {
	if e == nil {
		return nil
	}
	return &checkpointEvent{Seq: e.seq, SeqOK: e.seqOK, Name: e.name, From: e.from, FromOK: e.fromOK}
}

func eventIn(e *checkpointEvent) *lastEvent {
	if e == nil {
		return nil
	}
	return &lastEvent{seq: e.Seq, seqOK: e.SeqOK, name: e.Name, from: e.From, fromOK: e.FromOK}
}

// move copies *a to *b (out) or *b to *a.
func move[T any](out bool, a, b *T) {
	if out {
		*b = *a
	} else {
		*a = *b
	}
}

// staticHash is the SHA-256 of protocol.json's static declaration: the
// fields appends do not rewrite, encoded with sorted keys.
func staticHash(raw map[string]any) (string, error) {
	m := make(map[string]any, len(raw))
	for k, v := range raw {
		if !dynamicFields[k] {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return digest.Bytes(b), nil
}

// DefaultCheckpointPath is where the CLI keeps the checkpoint of folder:
// $ACPFS_CHECKPOINT_DIR, else acpfs/checkpoints in the user's cache
// directory, under a name derived from the folder's absolute path. It is
// "" when no such directory can be found (no checkpoint is used).
func DefaultCheckpointPath(folder string) string {
	dir := os.Getenv("ACPFS_CHECKPOINT_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(cache, "acpfs", "checkpoints")
	}
	abs, err := filepath.Abs(folder)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// OpenLogFrom is OpenLog starting from the checkpoint at path when it
// still describes the folder (see above), replaying only what was
// appended since; otherwise it replays the whole history. path "" means
// no checkpoint.
func OpenLogFrom(folder, path string) (*Log, error) {
	abs, err := filepath.Abs(folder)
	if err != nil {
		return nil, unavailable("folder", "resolve folder %s: %v", folder, err)
	}
	l := &Log{folder: abs, now: time.Now}
	l.mu.Lock()
	defer l.mu.Unlock()
	if path != "" {
		if err := l.loadProtocolLocked(); err != nil {
			return nil, err
		}
		l.restoreLocked(path) // a checkpoint that does not fit is ignored
	}
	if err := l.refreshLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

// restoreLocked adopts the checkpoint at path if it fits the folder.
func (l *Log) restoreLocked(path string) bool {
	b, err := readPrivate(path)
	if err != nil {
		return false
	}
	var cp checkpointFile
	if json.Unmarshal(b, &cp) != nil || cp.Version != checkpointVersion || cp.Folder != l.folder || cp.Offset <= 0 {
		return false
	}
	if h, err := staticHash(l.proto.Raw); err != nil || h != cp.Static {
		return false
	}
	f, id, err := openEvents(l.folder)
	if err != nil {
		return false
	}
	defer f.Close()
	n := int64(len(cp.LastLine))
	if id.dev != cp.Dev || id.ino != cp.Ino || id.size < cp.Offset || n == 0 || n > cp.Offset || cp.LastLine[n-1] != '\n' {
		return false
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, cp.Offset-n); err != nil || !bytes.Equal(got, cp.LastLine) {
		return false
	}
	if cp.Offset > n {
		// The last line starts a line: the byte before it ends one.
		var prev [1]byte
		if _, err := f.ReadAt(prev[:], cp.Offset-n-1); err != nil || prev[0] != '\n' {
			return false
		}
	}
	l.resetLocked()
	l.state = coreIn(&cp.State)
	l.seen = seqSet{contiguous: cp.Contiguous}
	for _, s := range cp.Extra {
		if l.seen.extra == nil {
			l.seen.extra = map[int]struct{}{}
		}
		l.seen.extra[s] = struct{}{}
	}
	l.offset, l.lines = cp.Offset, cp.Lines
	l.evID = fileID{dev: cp.Dev, ino: cp.Ino, size: cp.Offset}
	l.needReplay = false
	return true
}

// SaveCheckpoint writes the state derived so far to path (see
// OpenLogFrom). It writes nothing while the history has a problem or is
// empty.
func (l *Log) SaveCheckpoint(path string) error {
	b, err := l.checkpointData(path)
	if b == nil || err != nil {
		return err
	}
	return writePrivate(path, b)
}

// StartCheckpoint is SaveCheckpoint of the state as it is now, written
// while the caller goes on (an append, whose protocol.json write then
// syncs to disk at the same time as the checkpoint); wait returns the
// error of the write once it is done. A checkpoint of the state before
// an append still fits the folder after it: the next process applies
// that append's line on top of it.
func (l *Log) StartCheckpoint(path string) (wait func() error) {
	b, err := l.checkpointData(path)
	if b == nil || err != nil {
		return func() error { return err }
	}
	done := make(chan error, 1)
	go func() { done <- writePrivate(path, b) }()
	return func() error { return <-done }
}

// checkpointData renders the checkpoint of the state derived so far, or
// nil when none is to be written.
func (l *Log) checkpointData(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.historyBad != nil || l.offset == 0 || l.proto == nil {
		return nil, nil
	}
	static, err := staticHash(l.proto.Raw)
	if err != nil {
		return nil, err
	}
	f, id, err := openEvents(l.folder)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if id.dev != l.evID.dev || id.ino != l.evID.ino || id.size < l.offset {
		return nil, nil // replaced since: the next process replays
	}
	last, err := lastLine(f, l.offset)
	if err != nil {
		return nil, err
	}
	cp := checkpointFile{
		Version: checkpointVersion, Folder: l.folder, Static: static,
		Dev: l.evID.dev, Ino: l.evID.ino, Offset: l.offset, Lines: l.lines, LastLine: last,
		State: coreOut(&l.state), Contiguous: l.seen.contiguous,
	}
	for s := range l.seen.extra {
		cp.Extra = append(cp.Extra, s)
	}
	return json.Marshal(&cp)
}

// openEvents opens folder's events.jsonl for reading, without following
// a symlink in its place, and identifies the file it opened.
func openEvents(folder string) (*os.File, fileID, error) {
	f, err := openFile(filepath.Join(folder, EventsFile), unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileID{}, err
	}
	return f, idOf(fi), nil
}

// lastLine returns the line of f that ends at off (with its newline).
func lastLine(f *os.File, off int64) ([]byte, error) {
	for chunk := int64(4096); ; chunk *= 4 {
		start := max(off-chunk, 0)
		buf := make([]byte, off-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(buf) == 0 || buf[len(buf)-1] != '\n' {
			return nil, fmt.Errorf("%s does not end a line at byte %d", EventsFile, off)
		}
		if i := bytes.LastIndexByte(buf[:len(buf)-1], '\n'); i >= 0 {
			return buf[i+1:], nil
		}
		if start == 0 {
			return buf, nil
		}
	}
}

// readPrivate reads path if it is a regular file of this user that
// nobody else may write, in a directory nobody else may write.
func readPrivate(path string) ([]byte, error) {
	for _, p := range []string{filepath.Dir(path), path} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, err
		}
		if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return nil, fmt.Errorf("%s is not private to uid %d", p, os.Geteuid())
		}
	}
	f, err := openFile(path, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// writePrivate replaces path with data, readable and writable by this
// user only, by the one rule of internal/atomicfile.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
