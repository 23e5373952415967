package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// DocsOptions tells the documents' sync what the host around it knows.
type DocsOptions struct {
	// Skip names folder-relative paths that are never synced, files or
	// directories (events.jsonl, the run directory, the views' staging
	// directory, ...). A path is skipped when it or a directory above it
	// is. Called from the sync's goroutine.
	Skip func(rel string) bool
	// Frozen returns the SHA-256 that the history recorded for a frozen
	// deliverable at rel.
	Frozen func(rel string) (sha string, ok bool)
	// Record writes an event to the host's ledger (kinds RecordConflict,
	// RecordFrozen, RecordRefused, RecordTooLarge); nil: logged only.
	Record func(kind ledger.Kind, rel, detail string)
	// Changed is called after the sync wrote or removed rel in the
	// folder; nil is fine when the views watch the folder themselves.
	Changed func(rel string)
}

// The kinds the sync passes to DocsOptions.Record.
const (
	// RecordConflict: a version based on a stale revision lost the name
	// and was kept beside it, under a ".conflict-" name.
	RecordConflict = ledger.KindDocConflict
	// RecordFrozen: a version of a frozen deliverable whose SHA-256 is
	// not the frozen one was neither applied nor published.
	RecordFrozen = ledger.KindFrozenRefused
	// RecordRefused: an entry of the store was not applied (bad path,
	// bad header, wrong hash, reserved name, not writable here).
	RecordRefused = ledger.KindDocRefused
	// RecordTooLarge: a file larger than a bucket value was not synced.
	RecordTooLarge = ledger.KindDocTooLarge
)

// protocolJSON is synced like a document, but only its static part: each
// host derives currentPhase, proposalOwner, waitingFor and updatedAt from
// the history itself.
const protocolJSON = protocol.ProtocolFile

var derivedFields = []string{"currentPhase", "proposalOwner", "waitingFor", "updatedAt"}

// neverSynced are reserved whatever DocsOptions.Skip says: the history
// travels through its own stream, and the views' private files
// (fs.StagingDir) concern one view, and .acpfs is the views' virtual
// directory.
var neverSynced = map[string]bool{protocol.EventsFile: true, ".acpfs-staging": true, ".acpfs": true}

// headerRoom is what a value's header may take besides the content.
const headerRoom = 4 << 10

// maxPathLen bounds a synced path: the key (base64 of the path) travels
// in a subject, within the protocol's 4 KiB control line.
const maxPathLen = 1024

// The sync's own health checks. Any request may fail while a cluster
// fails over (a publication stored but its answer lost, a watch whose
// consumer died with its node), and nothing else would tell: every
// checkEvery the sync makes sure the watch keeps up with the bucket,
// and at the next check after a failed publication (every rescanEvery
// anyway, a safety net that reads every file) it publishes whatever
// the folder holds that this host has not published.
const (
	checkEvery  = 2 * time.Second
	rescanEvery = 10 * time.Second
	// stallLimit is how long the watch may stay behind the bucket (or
	// in its first replay) without progress before it is started again.
	stallLimit = 8 * time.Second
)

// busyLimit is how long a file seen written but not closed holds back
// remote versions of it and its own publication.
const busyLimit = 5 * time.Second

// Docs keeps a host's folder and the collaboration's DOCS bucket in
// step. See docs/multihost.md, "Documents", for the rules.
//
// Everything but the public methods runs on one goroutine, so a path is
// never published and applied at the same time.
type Docs struct {
	s    *Store
	root *safeio.Root
	opts DocsOptions
	w    *dirWatch

	// Owned by the loop goroutine.
	known      map[string]docState
	wds        map[int]string
	busy       map[string]time.Time
	deferred   map[string]jetstream.KeyValueEntry
	kw         jetstream.KeyWatcher
	updates    <-chan jetstream.KeyValueEntry
	stopKW     context.CancelFunc // ends the watch's subscription
	watchStart time.Time
	collecting bool
	// watchFailing: the last attempt to watch the bucket failed.
	watchFailing bool
	initial      []jetstream.KeyValueEntry
	applied      uint64
	// floor: the bucket's last revision when the watch was restarted;
	// its first replay covers everything up to it.
	floor uint64
	// behindSince, behindAt: since when, and at which revision, the
	// watch has been behind the bucket without progress.
	behindSince time.Time
	behindAt    uint64
	lastCheck   time.Time
	lastScan    time.Time
	// dirty: a publication failed; the next check scans again.
	dirty bool
	// session tells this sync's own publications apart (docHeader).
	session string
	waiters []waiter
	parked  []parked
	refused map[string]bool // refusals recorded, so that a replay does not repeat them

	mu       sync.Mutex
	notified map[string]bool

	kick      chan struct{}
	reconnect chan struct{}
	reqs      chan chan error
	ready     chan struct{}
	readyOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// docState is the last revision of a path this host knows, and the
// digest of its content (see digest); deleted for a delete marker.
type docState struct {
	rev     uint64
	digest  string
	deleted bool
}

func (s docState) live() bool { return s.rev != 0 && !s.deleted }

// parked is an entry a replace took out of the way while someone held
// it open for writing: it is judged once they close it.
type parked struct {
	rel  string
	old  *safeio.Detached
	by   string
	safe []string
}

type waiter struct {
	rev  uint64
	done chan error
}

// docHeader precedes a document's content in a bucket value, on a line
// of its own.
type docHeader struct {
	V      int    `json:"v"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Host   string `json:"host"`
	// Base is the revision the writer's version was based on (0: none).
	Base uint64 `json:"base"`
	Size int64  `json:"size"`
	// Mode is the permission bits of the writer's file (mode & 0o777),
	// given to the file on every host (see modeOf).
	Mode uint32 `json:"mode"`
	// ConflictOf names the path a conflict copy lost.
	ConflictOf string `json:"conflictOf,omitempty"`
	// Session identifies the sync that wrote the revision (random, per
	// start): a host recognises its own publications whose answer it
	// never got.
	Session string `json:"session,omitempty"`
}

// SyncDocs starts keeping folder and the store's documents in step, on
// a goroutine of its own, until ctx ends or Close is called. Call
// Bootstrap before the views start.
func SyncDocs(ctx context.Context, s *Store, folder string, opts DocsOptions) (*Docs, error) {
	root, err := safeio.OpenRoot(folder)
	if err != nil {
		return nil, fmt.Errorf("documents of %s: %w", s.Collab(), err)
	}
	w, err := newDirWatch(folder)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("documents of %s: %w", s.Collab(), err)
	}
	d := &Docs{
		s: s, root: root, opts: opts, w: w,
		known: map[string]docState{}, wds: map[int]string{}, busy: map[string]time.Time{},
		deferred: map[string]jetstream.KeyValueEntry{}, notified: map[string]bool{}, refused: map[string]bool{},
		kick: make(chan struct{}, 1), reconnect: make(chan struct{}, 1), reqs: make(chan chan error),
		ready: make(chan struct{}), done: make(chan struct{}),
		session: newSession(),
	}
	// Watch before anything is read, so that no change falls between
	// the first scan and the watches.
	d.watchTree("")
	ctx, d.cancel = context.WithCancel(ctx)
	s.OnChange(func(up bool) {
		if up {
			select {
			case d.reconnect <- struct{}{}:
			default:
			}
		}
	})
	go d.run(ctx)
	return d, nil
}

// Bootstrap waits until this host has caught up once: every document of
// the bucket that the folder lacked is written (protocol.json first),
// and every document of the folder that the bucket lacked is published.
// On a host whose folder is empty, views must not start before it
// returns. It waits for the server as long as ctx lets it.
func (d *Docs) Bootstrap(ctx context.Context) error {
	select {
	case <-d.ready:
		return nil
	case <-d.done:
		return errors.New("documents: the sync has stopped")
	case <-ctx.Done():
		return fmt.Errorf("documents of %s: first catch-up: %w", d.s.Collab(), ctx.Err())
	}
}

// Notify says that rel was just written and closed (a view's release):
// it is published without waiting for the folder's watch.
func (d *Docs) Notify(rel string) {
	d.mu.Lock()
	d.notified[rel] = true
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Sync publishes every change of the folder not yet published (files
// being written excepted) and waits until every revision the bucket
// held then is applied here. ErrOffline when the server is unreachable.
func (d *Docs) Sync(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case d.reqs <- done:
	case <-d.done:
		return errors.New("documents: the sync has stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-d.done:
		return errors.New("documents: the sync has stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the sync.
func (d *Docs) Close() error {
	d.cancel()
	<-d.done
	err := d.w.close()
	if cerr := d.root.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d *Docs) run(ctx context.Context) {
	defer close(d.done)
	defer d.stopWatch()
	defer d.keepParked()
	// The tick retries the bucket's watch and looks at files being
	// written (nothing signals that a writer let a file go).
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	events := d.w.events
	d.startWatch(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case batch, ok := <-events:
			if !ok {
				slog.Warn("documents: the folder's watch stopped; changes are published on reconnect and Sync only", "folder", d.root.Name())
				events = nil
				continue
			}
			d.onFileEvents(batch)
		case err := <-d.w.errs:
			slog.Warn("documents: folder watch", "folder", d.root.Name(), "err", err)
			d.scan("")
		case e, ok := <-d.updates:
			d.onEntry(e, ok)
		case <-d.kick:
			d.mu.Lock()
			rels := d.notified
			d.notified = map[string]bool{}
			d.mu.Unlock()
			for rel := range rels {
				delete(d.busy, rel)
				d.local(rel)
				d.applyDeferred(rel)
			}
		case done := <-d.reqs:
			d.onSync(done)
		case <-d.reconnect:
			d.stopWatch()
			d.startWatch(ctx)
		case <-tick.C:
			if d.kw == nil {
				d.startWatch(ctx)
			}
			d.expireBusy()
			d.checkParked()
			if time.Since(d.lastCheck) >= checkEvery {
				d.lastCheck = time.Now()
				d.check(ctx)
			}
		}
	}
}

// check makes sure the sync converges again after whatever went wrong:
// a watch that stalls (its consumer lost with a node, its first replay
// never ending) is started again, and the folder is scanned again for
// versions this host failed to publish.
func (d *Docs) check(ctx context.Context) {
	if !d.s.Connected() || d.kw == nil {
		return
	}
	if d.collecting {
		if time.Since(d.watchStart) > stallLimit {
			slog.Warn("documents: the bucket's first replay stalled; watching again", "collab", d.s.Collab())
			d.restartWatch(ctx, 0)
		}
		return
	}
	sctx, cancel := d.s.ctx()
	st, err := d.s.docs.Status(sctx)
	cancel()
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && err == nil {
		last := bs.StreamInfo().State.LastSeq
		switch {
		case d.applied >= last:
			d.behindSince = time.Time{}
		case d.behindSince.IsZero() || d.applied > d.behindAt:
			d.behindSince, d.behindAt = time.Now(), d.applied
		case time.Since(d.behindSince) > stallLimit:
			slog.Warn("documents: the bucket's watch stalled; watching again", "collab", d.s.Collab(),
				"applied", d.applied, "bucket", last)
			d.restartWatch(ctx, last)
			return // the replay ends with a scan
		}
	}
	if d.dirty || time.Since(d.lastScan) >= rescanEvery {
		d.scan("")
	}
}
