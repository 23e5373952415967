package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/safeio"
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
	Record func(kind, rel, detail string)
	// Changed is called after the sync wrote or removed rel in the
	// folder; nil is fine when the views watch the folder themselves.
	Changed func(rel string)
}

// The kinds the sync passes to DocsOptions.Record.
const (
	// RecordConflict: a version based on a stale revision lost the name
	// and was kept beside it, under a ".conflict-" name.
	RecordConflict = "doc_conflict"
	// RecordFrozen: a version of a frozen deliverable whose SHA-256 is
	// not the frozen one was neither applied nor published.
	RecordFrozen = "frozen_refused"
	// RecordRefused: an entry of the store was not applied (bad path,
	// bad header, wrong hash, reserved name, not writable here).
	RecordRefused = "doc_refused"
	// RecordTooLarge: a file larger than a bucket value was not synced.
	RecordTooLarge = "doc_too_large"
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

// restartWatch drops the watch and starts another, whose first replay
// brings the last revision of every key again.
func (d *Docs) restartWatch(ctx context.Context, floor uint64) {
	d.stopWatch()
	d.floor = floor
	d.startWatch(ctx)
}

// startWatch follows the bucket: first the last revision of every key
// (applied together, then the folder is scanned), then every update.
func (d *Docs) startWatch(ctx context.Context) {
	if !d.s.Connected() {
		return
	}
	// The watch's context bounds the creation of its consumer too: a
	// request that the server never answers (its JetStream leader died
	// meanwhile) would otherwise hold this goroutine for good. Ending
	// the context also ends the subscription, so it is only ended on
	// time out, never when the watch was made in time.
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(d.s.opts.Timeout, cancel)
	kw, err := d.s.docs.WatchAll(wctx)
	if !timer.Stop() && err == nil {
		drainWatch(kw)
		kw, err = nil, fmt.Errorf("watch the bucket: %w", context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		// Retried at every tick: said once.
		if !d.watchFailing {
			slog.Warn("documents: watch the bucket", "collab", d.s.Collab(), "err", offline(err))
		}
		d.watchFailing = true
		return
	}
	d.watchFailing = false
	d.kw, d.updates, d.stopKW = kw, kw.Updates(), cancel
	d.collecting, d.initial, d.watchStart = true, nil, time.Now()
	d.behindSince = time.Time{}
}

func (d *Docs) stopWatch() {
	if d.kw != nil {
		drainWatch(d.kw)
	}
	d.dropWatch()
}

// dropWatch forgets the watch (stopped, or ended by itself).
func (d *Docs) dropWatch() {
	if d.stopKW != nil {
		d.stopKW()
	}
	d.kw, d.updates, d.stopKW, d.collecting, d.initial = nil, nil, nil, false, nil
}

// drainWatch stops a watch. Its subscription blocks on a full channel:
// it is drained until the subscription closes it.
func drainWatch(kw jetstream.KeyWatcher) {
	ch := kw.Updates()
	_ = kw.Stop()
	go func() {
		for range ch {
		}
	}()
}

func (d *Docs) onEntry(e jetstream.KeyValueEntry, ok bool) {
	switch {
	case !ok:
		// The subscription ended (connection closed, consumer lost):
		// the tick starts another.
		d.dropWatch()
	case e == nil:
		// The last initial value: protocol.json first, so that a host
		// that starts from an empty folder gets a collaboration before
		// its documents.
		initial := d.initial
		d.collecting, d.initial = false, nil
		d.applied = max(d.applied, d.floor)
		d.floor = 0
		pk := keyOf(protocolJSON)
		sort.SliceStable(initial, func(i, j int) bool {
			return initial[i].Key() == pk && initial[j].Key() != pk
		})
		for _, e := range initial {
			d.applyEntry(e)
		}
		// What changed here meanwhile (offline, or before this host
		// started) is published now.
		d.scan("")
		d.readyOnce.Do(func() { close(d.ready) })
		d.checkWaiters()
	case d.collecting:
		d.initial = append(d.initial, e)
	default:
		d.applyEntry(e)
		d.checkWaiters()
	}
}

func (d *Docs) onSync(done chan error) {
	if !d.s.Connected() {
		done <- fmt.Errorf("documents: %w", ErrOffline)
		return
	}
	d.expireBusy()
	d.scan("")
	ctx, cancel := d.s.ctx()
	defer cancel()
	st, err := d.s.docs.Status(ctx)
	if err != nil {
		done <- fmt.Errorf("documents bucket: %w", offline(err))
		return
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		last = bs.StreamInfo().State.LastSeq
	}
	d.waiters = append(d.waiters, waiter{rev: last, done: done})
	d.checkWaiters()
}

func (d *Docs) checkWaiters() {
	if d.kw == nil || d.collecting {
		return
	}
	keep := d.waiters[:0]
	for _, w := range d.waiters {
		if d.applied >= w.rev {
			w.done <- nil
		} else {
			keep = append(keep, w)
		}
	}
	d.waiters = keep
}

// onFileEvents turns the folder's inotify events into publications.
func (d *Docs) onFileEvents(batch []fileEvent) {
	for _, ev := range batch {
		if ev.mask&unix.IN_IGNORED != 0 {
			delete(d.wds, ev.wd)
			continue
		}
		dir, ok := d.wds[ev.wd]
		if !ok || ev.name == "" {
			continue
		}
		rel := ev.name
		if dir != "" {
			rel = dir + "/" + ev.name
		}
		if d.skipped(rel) {
			continue
		}
		switch {
		case ev.mask&unix.IN_ISDIR != 0:
			if ev.mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 {
				d.dropDir(rel)
			}
			if ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				d.scan(rel)
			}
		case ev.mask&unix.IN_MODIFY != 0:
			if _, ok := d.busy[rel]; !ok {
				d.busy[rel] = time.Now()
			}
		case ev.mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
			delete(d.busy, rel)
			d.local(rel)
			d.applyDeferred(rel)
		}
	}
}

// expireBusy takes up the files seen written that nobody holds open for
// writing any more (their close was seen before the writer let go, or
// not at all), and, after busyLimit, those of a writer that keeps its
// descriptor open.
func (d *Docs) expireBusy() {
	for rel, since := range d.busy {
		if time.Since(since) > busyLimit || !d.root.Writing(rel) {
			delete(d.busy, rel)
			d.local(rel)
			d.applyDeferred(rel)
		}
	}
}

func (d *Docs) applyDeferred(rel string) {
	if e, ok := d.deferred[rel]; ok {
		delete(d.deferred, rel)
		d.applyEntry(e)
	}
}

// watchTree watches the directory rel and every directory below it.
func (d *Docs) watchTree(rel string) {
	d.walk(rel, nil)
}

// walk watches the directories from rel down and, with seen, publishes
// the files found there and notes them in seen.
func (d *Docs) walk(rel string, seen map[string]bool) {
	if rel != "" && d.skipped(rel) {
		return
	}
	wd, err := d.w.add(rel)
	if err != nil {
		slog.Warn("documents: a directory of the folder is not watched; its changes are published on reconnect and Sync only", "dir", rel, "err", err)
	} else {
		d.wds[wd] = rel
	}
	ents, err := d.root.ReadDir(rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Warn("documents: list a directory of the folder", "dir", rel, "err", err)
		}
		return
	}
	for _, e := range ents {
		child := e.Name
		if rel != "" {
			child = rel + "/" + e.Name
		}
		if d.skipped(child) {
			continue
		}
		switch e.Type {
		case unix.S_IFDIR:
			d.walk(child, seen)
		default:
			if seen != nil {
				seen[child] = true
				d.local(child)
			}
		}
	}
}

// scan publishes what differs between the folder below rel and what
// this host knows: changed files, and known files that are gone.
func (d *Docs) scan(rel string) {
	if rel == "" {
		d.lastScan, d.dirty = time.Now(), false
	}
	seen := map[string]bool{}
	d.walk(rel, seen)
	var gone []string
	for p, st := range d.known {
		if st.live() && !seen[p] && (rel == "" || strings.HasPrefix(p, rel+"/")) {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		d.local(p)
	}
}

// dropDir forgets the watches of a directory that was removed or moved
// away, and publishes the removal of the documents it held.
func (d *Docs) dropDir(rel string) {
	for wd, p := range d.wds {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			d.w.remove(wd)
			delete(d.wds, wd)
		}
	}
	var gone []string
	for p, st := range d.known {
		if st.live() && strings.HasPrefix(p, rel+"/") {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		d.local(p)
	}
}

// skipped reports whether rel is never synced: reserved names, the
// caller's Skip, the temporary files of atomic rewrites (ours, the
// protocol log's, atomicfile's).
func (d *Docs) skipped(rel string) bool {
	base := path.Base(rel)
	if strings.HasPrefix(base, safeio.TempPrefix) || (strings.HasPrefix(base, ".") && strings.Contains(base, ".tmp-")) {
		return true
	}
	for p := rel; ; {
		if neverSynced[p] || (d.opts.Skip != nil && d.opts.Skip(p)) {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// limit is the largest content a value can carry: the bucket's bound,
// and the server's largest message.
func (d *Docs) limit() int64 {
	l := int64(maxDocValue)
	if mp := d.s.nc.MaxPayload(); mp > 0 && mp < l {
		l = mp
	}
	return l - headerRoom
}

// local publishes the state of rel in the folder, if it differs from
// the last revision this host knows.
func (d *Docs) local(rel string) {
	if !safeio.Valid(rel) || d.skipped(rel) {
		return
	}
	if _, ok := d.busy[rel]; ok {
		return // published when closed
	}
	if len(rel) > maxPathLen {
		d.refuse(RecordRefused, rel, fmt.Sprintf("a path longer than %d bytes is not synced", maxPathLen))
		return
	}
	if d.kw == nil || d.collecting || !d.s.Connected() {
		return // the scan after the next catch-up publishes it
	}
	st := d.known[rel]
	data, info, err := d.root.ReadFile(rel, d.limit())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !st.live() {
			return
		}
		if why := d.protected(rel); why != "" {
			// Views refuse this removal; a disk edit must not get
			// around them.
			d.refuse(RecordRefused, rel, fmt.Sprintf("removed from the folder here at revision %d, but %s is never removed: the removal is not published, and the store's version is written back", st.rev, why))
			d.restore(rel)
			return
		}
		d.publishDelete(rel, st)
		return
	case errors.Is(err, safeio.ErrNotRegular):
		// Symlinks, hard-linked files, devices: views conceal them,
		// and reading a hard link could read a file from anywhere.
		return
	case errors.Is(err, safeio.ErrTooLarge):
		d.refuse(RecordTooLarge, rel, fmt.Sprintf("%d bytes: more than the %d a document of the store may hold; not synced", info.Size, d.limit()))
		return
	case errors.Is(err, unix.EAGAIN):
		// A lease on the file is being broken: look again shortly.
		d.busy[rel] = time.Now()
		return
	case err != nil:
		slog.Warn("documents: read a file of the folder", "path", rel, "err", err)
		return
	}
	if info.Writing {
		// A write in progress: published when it is closed.
		d.busy[rel] = time.Now()
		return
	}
	dg := digest(rel, data)
	if st.live() && st.digest == dg {
		return
	}
	if sum, ok := d.frozen(rel); ok && sha(data) != sum {
		d.refuse(RecordFrozen, rel, fmt.Sprintf("the local copy's SHA-256 %s is not the frozen %s; not published", sha(data), sum))
		return
	}
	if rel == protocolJSON {
		d.publishProtocol(data, info.Mode, dg, st)
		return
	}
	d.publish(rel, data, info.Mode, dg, st)
}

func (d *Docs) frozen(rel string) (string, bool) {
	if d.opts.Frozen == nil {
		return "", false
	}
	return d.opts.Frozen(rel)
}

// publish makes data the next revision of rel, on condition that the
// bucket's last revision is still the one this host based it on.
func (d *Docs) publish(rel string, data []byte, mode uint32, dg string, st docState) {
	// A failure other than a conflict may have been stored all the same
	// (a time out during a failover): the retry meets that revision and
	// recognises it as this host's (ours).
	if d.put(rel, st.rev, d.encode(rel, data, mode, st.rev, ""), dg) {
		d.lost(rel, data, mode, dg, st)
	}
}

// failed logs a request that failed and has the next check scan the
// folder again, so that the version is published after all.
func (d *Docs) failed(what, rel string, err error) {
	d.dirty = true
	slog.Warn("documents: "+what, "path", rel, "err", offline(err))
}

// ours reports whether h is a revision this sync published on top of
// st, the revision it knows: one whose answer it never got. The folder
// holds that version or a later one, so it is no one else's version.
func (d *Docs) ours(h docHeader, st docState) bool {
	return h.Session == d.session && h.Host == d.s.Host() && h.Base == st.rev && h.ConflictOf == ""
}

func isCAS(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLast(err)
}

// lost handles a publication refused because the bucket moved on: the
// revision that reached the store first keeps the name, and this
// host's version is kept beside it as a conflict copy, unless it is
// already in the store.
func (d *Docs) lost(rel string, data []byte, mode uint32, dg string, st docState) {
	key := keyOf(rel)
	for try := 0; try < 4; try++ {
		e, err := d.get(key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// Deleted meanwhile: an edit outlives a deletion (the
			// deleted content stays in the bucket's history).
			if d.put(rel, 0, d.encode(rel, data, mode, st.rev, ""), dg) {
				continue
			}
			return
		}
		if err != nil {
			d.failed("publish", rel, err)
			return
		}
		h, content, derr := decodeDoc(e.Value(), rel)
		switch {
		case derr != nil:
			// The store's revision is not a valid document: replace it.
		case digest(rel, content) == dg:
			d.known[rel] = docState{rev: e.Revision(), digest: dg}
			return
		case d.ours(h, st):
			// This host's own earlier version, stored though its
			// publication timed out: this one follows it.
			st = docState{rev: e.Revision(), digest: digest(rel, content)}
			d.known[rel] = st
		default:
			if !d.inHistory(rel, dg) {
				d.conflict(rel, data, mode, fmt.Sprintf("a version based on revision %d lost to revision %d by %s", st.rev, e.Revision(), h.Host))
			}
			d.applyValue(rel, e.Revision(), h, content, dg)
			return
		}
		if d.put(rel, e.Revision(), d.encode(rel, data, mode, e.Revision(), ""), dg) {
			continue
		}
		return
	}
	d.dirty = true
	slog.Warn("documents: publish: the bucket keeps moving; retried at the next scan", "path", rel)
}

// get reads the last revision of key.
func (d *Docs) get(key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := d.s.ctx()
	defer cancel()
	return d.s.docs.Get(ctx, key)
}

// put publishes val as the revision of rel after base (0: a new key),
// and says whether the bucket moved on meanwhile (try again).
func (d *Docs) put(rel string, base uint64, val []byte, dg string) (again bool) {
	ctx, cancel := d.s.ctx()
	defer cancel()
	var rev uint64
	var err error
	if base == 0 {
		rev, err = d.s.docs.Create(ctx, keyOf(rel), val)
	} else {
		rev, err = d.s.docs.Update(ctx, keyOf(rel), val, base)
	}
	switch {
	case err == nil:
		d.known[rel] = docState{rev: rev, digest: dg}
		return false
	case isCAS(err):
		return true
	default:
		d.failed("publish", rel, err)
		return false
	}
}

// publishDelete removes rel from the bucket, on condition that nobody
// published a newer revision (which then comes back here instead).
func (d *Docs) publishDelete(rel string, st docState) {
	ctx, cancel := d.s.ctx()
	defer cancel()
	err := d.s.docs.Delete(ctx, keyOf(rel), jetstream.LastRevision(st.rev))
	switch {
	case err == nil:
		// The marker's revision comes with the watch.
		d.known[rel] = docState{rev: st.rev, deleted: true}
	case isCAS(err):
		e, err := d.get(keyOf(rel))
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				d.known[rel] = docState{rev: st.rev, deleted: true}
			} else {
				d.failed("publish a removal", rel, err)
			}
			return
		}
		d.applyEntry(e)
	default:
		d.failed("publish a removal", rel, err)
	}
}

// applyEntry applies a revision of the bucket that this host did not
// write, after checking everything in it.
func (d *Docs) applyEntry(e jetstream.KeyValueEntry) {
	d.applied = max(d.applied, e.Revision())
	rel, ok := pathOfKey(e.Key())
	if !ok || d.skipped(rel) {
		d.refuse(RecordRefused, rel, fmt.Sprintf("revision %d: key %.80q is not a path this host syncs", e.Revision(), e.Key()))
		return
	}
	st := d.known[rel]
	if e.Revision() <= st.rev {
		return
	}
	if _, ok := d.busy[rel]; ok {
		// Someone is writing rel here: decide when the write is done.
		d.deferred[rel] = e
		return
	}
	if rel == protocolJSON {
		d.applyProtocol(e, st)
		return
	}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		d.applyDelete(rel, e.Revision(), st)
	default:
		h, content, err := decodeDoc(e.Value(), rel)
		if err != nil {
			d.refuse(RecordRefused, rel, fmt.Sprintf("revision %d: %v", e.Revision(), err))
			return
		}
		if d.ours(h, st) {
			// This host's own version, stored though its publication
			// timed out: the folder holds it or a later version, which
			// is published now.
			d.known[rel] = docState{rev: e.Revision(), digest: digest(rel, content)}
			d.local(rel)
			return
		}
		d.applyValue(rel, e.Revision(), h, content, st.digest)
	}
}

// applyValue puts a revision into the folder. safe lists the digests of
// local versions that may be overwritten: any other local version found
// in the way is kept as a conflict copy.
func (d *Docs) applyValue(rel string, rev uint64, h docHeader, content []byte, safe ...string) {
	dg := digest(rel, content)
	if sum, ok := d.frozen(rel); ok && h.SHA256 != sum {
		d.refuse(RecordFrozen, rel, fmt.Sprintf("revision %d by %s has SHA-256 %s, not the frozen %s; not applied", rev, h.Host, h.SHA256, sum))
		return
	}
	local, _, err := d.root.ReadFile(rel, d.limit())
	if err == nil && digest(rel, local) == dg {
		d.known[rel] = docState{rev: rev, digest: dg}
		return
	}
	if err == nil && rel == protocolJSON {
		// The history rewrites this host's protocol.json; only a host
		// without one takes the store's. What this host knows is the
		// store's, so that a static part that differs here is refused
		// when it is looked at (publishProtocol).
		d.known[rel] = docState{rev: rev, digest: dg}
		return
	}
	old, err := d.root.Replace(rel, content, modeOf(h.Mode), d.limit())
	if err != nil {
		d.refuse(RecordRefused, rel, fmt.Sprintf("revision %d by %s cannot be written here: %v", rev, h.Host, err))
		return
	}
	d.known[rel] = docState{rev: rev, digest: dg}
	d.keepDisplaced(rel, old, fmt.Sprintf("revision %d by %s", rev, h.Host), append(safe, dg)...)
	d.changed(rel)
}

// applyDelete removes rel if this host's copy is the content deleted; a
// local version not yet published outlives the deletion and is
// published over it.
func (d *Docs) applyDelete(rel string, rev uint64, st docState) {
	gone := docState{rev: rev, deleted: true}
	if why := d.protected(rel); why != "" {
		// Whoever removed it did it behind the views' backs (or is
		// not an acpfs host): this host's copy, or the store's last
		// version, is published again over the removal.
		d.known[rel] = gone
		d.refuse(RecordRefused, rel, fmt.Sprintf("the removal at revision %d is not applied: %s is never removed; it is published again", rev, why))
		if _, err := d.root.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
			d.restore(rel)
		} else {
			d.local(rel)
		}
		return
	}
	det, err := d.root.Detach(rel, d.limit())
	if err != nil {
		d.known[rel] = gone
		return
	}
	d.known[rel] = gone
	if det.Busy() {
		// Being written: the write goes on, and is published over the
		// deletion when it is closed.
		if err := det.Restore(); err != nil {
			d.keepDisplaced(rel, det, fmt.Sprintf("the removal at revision %d", rev))
		}
		return
	}
	det.Reread(d.limit())
	if !det.Info.Regular() || det.Content == nil {
		if det.Restore() != nil {
			_ = det.Discard()
		}
		return
	}
	dg := digest(rel, det.Content)
	if (st.live() && dg == st.digest) || (st.rev == 0 && d.inHistory(rel, dg)) {
		if err := det.Discard(); err != nil {
			slog.Warn("documents: remove", "path", rel, "err", err)
		}
		d.changed(rel)
		return
	}
	if err := det.Restore(); err != nil {
		// Someone made the name meanwhile: keep both.
		d.conflict(rel, det.Content, det.Info.Mode, fmt.Sprintf("a version not yet published was in the way of revision %d", rev))
		_ = det.Discard()
		return
	}
	d.local(rel)
}

// keepDisplaced discards the entry a replace took out of rel, after
// keeping its content as a conflict copy if it is a version that would
// otherwise be lost.
func (d *Docs) keepDisplaced(rel string, old *safeio.Detached, by string, safe ...string) {
	if old == nil {
		return
	}
	if old.Busy() {
		d.parked = append(d.parked, parked{rel: rel, old: old, by: by, safe: safe})
		return
	}
	// Nobody can open it by its name any more, and nobody holds it open
	// for writing now: what is read now is its last version.
	old.Reread(d.limit())
	if old.Info.Regular() {
		switch {
		case old.Content != nil:
			dg := digest(rel, old.Content)
			if !slices.Contains(safe, dg) && !d.inHistory(rel, dg) {
				d.conflict(rel, old.Content, old.Info.Mode, "a local version not yet published was in the way of "+by)
			}
		case old.Err != nil:
			// Too large for the store (or unreadable): keep it here.
			if !d.keepLocal(rel, old, fmt.Sprintf("a local version (%v) was in the way of %s", old.Err, by)) {
				old.Leave()
			}
			return
		}
	}
	if err := old.Discard(); err != nil {
		slog.Warn("documents: remove a displaced entry", "path", rel, "err", err)
	}
}

// checkParked judges the displaced entries whose writers are done.
func (d *Docs) checkParked() {
	if len(d.parked) == 0 {
		return
	}
	ps := d.parked
	d.parked = nil
	for _, p := range ps {
		if p.old.Busy() {
			d.parked = append(d.parked, p)
			continue
		}
		d.keepDisplaced(p.rel, p.old, p.by, p.safe...)
	}
}

// keepLocal renames a displaced entry to a conflict name in its
// directory, on this host only; the next scan publishes it if it can.
func (d *Docs) keepLocal(rel string, old *safeio.Detached, why string) bool {
	for i := 1; i <= 16; i++ {
		tag := "local"
		if i > 1 {
			tag = fmt.Sprintf("local%d", i)
		}
		name := conflictName(rel, d.s.Host(), tag)
		err := old.KeepAs(path.Base(name))
		if err == nil {
			slog.Warn("documents: conflicting versions; both kept", "path", rel, "kept_as", name, "why", why)
			d.record(RecordConflict, rel, why+"; that version is kept as "+name)
			d.changed(name)
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	slog.Warn("documents: a displaced local version is left under a temporary name", "path", rel, "why", why)
	return false
}

// keepParked runs when the sync stops: the displaced entries still held
// open for writing get conflict names, so the writes go on into a file
// of the folder.
func (d *Docs) keepParked() {
	for _, p := range d.parked {
		if !d.keepLocal(p.rel, p.old, "a version being written was in the way of "+p.by+" when the sync stopped") {
			p.old.Leave()
		}
	}
	d.parked = nil
}

// conflict keeps a version that lost the name rel: published under a
// conflict name, and written beside rel (on every host, through the
// bucket).
func (d *Docs) conflict(rel string, data []byte, mode uint32, why string) {
	sum := sha(data)
	name := conflictName(rel, d.s.Host(), sum[:12])
	slog.Warn("documents: conflicting versions; both kept", "path", rel, "kept_as", name, "why", why)
	d.record(RecordConflict, rel, why+"; that version is kept as "+name)
	if st := d.known[name]; !st.live() || st.digest != sum {
		ctx, cancel := d.s.ctx()
		rev, err := d.s.docs.Create(ctx, keyOf(name), d.encode(name, data, mode, 0, rel))
		if isCAS(err) {
			if e, gerr := d.s.docs.Get(ctx, keyOf(name)); gerr == nil {
				if _, content, derr := decodeDoc(e.Value(), name); derr == nil && sha(content) == sum {
					rev, err = e.Revision(), nil
				}
			}
		}
		cancel()
		if err == nil {
			d.known[name] = docState{rev: rev, digest: sum}
		} else {
			// The copy written below is published by a later scan.
			slog.Warn("documents: publish a conflict copy", "path", name, "err", offline(err))
		}
	}
	old, err := d.root.Replace(name, data, modeOf(mode), d.limit())
	if err != nil {
		slog.Warn("documents: write a conflict copy", "path", name, "err", err)
		return
	}
	d.keepDisplaced(name, old, "a conflict copy", sum)
	d.changed(name)
}

// conflictName is the name of a version of rel kept beside it:
//
//	DIR/BASE.conflict-HOST-TAG
//
// HOST is the host whose version lost (a store host name:
// [A-Za-z0-9_-]{1,64}, never a '.'); TAG is the first 12 lowercase hex
// digits of that version's SHA-256, or "local", "local2" ... "local16"
// for a version kept on its host only. The views judge a conflict copy
// by the name of its original (grants/), so this format must not
// change. BASE is cut (at a character boundary) when the whole name
// would exceed 255 bytes: only then is the original not BASE.
func conflictName(rel, host, tag string) string {
	dir, base := path.Split(rel)
	suffix := ".conflict-" + host + "-" + tag
	if len(base)+len(suffix) > 255 {
		n := 255 - len(suffix)
		for n > 0 && !utf8.RuneStart(base[n]) {
			n--
		}
		base = base[:n]
	}
	return dir + base + suffix
}

// inHistory reports whether a version of rel with digest dg is among
// the revisions the bucket keeps: overwriting it here loses nothing.
func (d *Docs) inHistory(rel, dg string) bool {
	if !d.s.Connected() {
		return false
	}
	ctx, cancel := d.s.ctx()
	defer cancel()
	hist, err := d.s.docs.History(ctx, keyOf(rel))
	if err != nil {
		return false
	}
	for _, e := range hist {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if _, content, err := decodeDoc(e.Value(), rel); err == nil && digest(rel, content) == dg {
			return true
		}
	}
	return false
}

// refuse logs and records a refusal, once: the bucket's entries are
// replayed at every reconnection, and a scan meets the same file again.
func (d *Docs) refuse(kind, rel, detail string) {
	k := kind + "\x00" + rel + "\x00" + detail
	if d.refused[k] {
		return
	}
	d.refused[k] = true
	slog.Warn("documents: "+kind, "path", rel, "detail", detail)
	d.record(kind, rel, detail)
}

func (d *Docs) record(kind, rel, detail string) {
	if d.opts.Record != nil {
		d.opts.Record(kind, rel, detail)
	}
}

func (d *Docs) changed(rel string) {
	if d.opts.Changed != nil {
		d.opts.Changed(rel)
	}
}

func (d *Docs) encode(rel string, data []byte, mode uint32, base uint64, conflictOf string) []byte {
	h := docHeader{V: 1, Path: rel, SHA256: sha(data), Host: d.s.Host(), Base: base,
		Size: int64(len(data)), Mode: mode & 0o777, ConflictOf: conflictOf, Session: d.session}
	hb, _ := json.Marshal(h)
	out := make([]byte, 0, len(hb)+1+len(data))
	out = append(append(append(out, hb...), '\n'), data...)
	return out
}

// decodeDoc parses a bucket value for the path rel and checks it: the
// header names rel, and the content has the size and SHA-256 it states.
func decodeDoc(val []byte, rel string) (docHeader, []byte, error) {
	var h docHeader
	i := bytes.IndexByte(val, '\n')
	if i < 0 || i > headerRoom {
		return h, nil, errors.New("no document header")
	}
	if err := json.Unmarshal(val[:i], &h); err != nil {
		return h, nil, fmt.Errorf("document header: %w", err)
	}
	content := val[i+1:]
	switch {
	case h.V != 1:
		return h, nil, fmt.Errorf("document header version %d", h.V)
	case h.Path != rel:
		return h, nil, fmt.Errorf("the header names %.200q", h.Path)
	case h.Size != int64(len(content)):
		return h, nil, fmt.Errorf("%d bytes where the header says %d", len(content), h.Size)
	case h.SHA256 != sha(content):
		return h, nil, fmt.Errorf("the content's SHA-256 is not the header's %.64q", h.SHA256)
	}
	return h, content, nil
}

// keyOf is the bucket key of rel: base64url, whose alphabet keys allow
// (the path itself is in the value's header).
func keyOf(rel string) string { return base64.RawURLEncoding.EncodeToString([]byte(rel)) }

// pathOfKey decodes a key, and says whether it is a path a host may
// write: relative, clean, without "..".
func pathOfKey(key string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return "", false
	}
	rel := string(b)
	return rel, safeio.Valid(rel) && len(rel) <= maxPathLen
}

// modeOf is the mode a synced file gets: the permission bits of the
// writer's file, so that a private file stays private on every host.
// Set-id and sticky bits are never carried: a host never makes a set-id
// file because another host's value says so.
func modeOf(m uint32) uint32 { return m & 0o777 }

// newSession returns a random identifier for one run of the sync.
func newSession() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// digest identifies a version for comparison: its SHA-256, or for
// protocol.json that of its static part only, so that the fields every
// host derives from the history itself never count as a change.
func digest(rel string, b []byte) string {
	if rel == protocolJSON {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil && m != nil {
			for _, k := range derivedFields {
				delete(m, k)
			}
			if c, err := json.Marshal(m); err == nil {
				return "static:" + sha(c)
			}
		}
	}
	return sha(b)
}
