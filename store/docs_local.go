package store

// The documents' sync: the host's own files (events, walks, publication).

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/safeio"
)

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
	dg := versionDigest(rel, data)
	if st.live() && st.digest == dg {
		return
	}
	if sum, ok := d.frozen(rel); ok && digest.Bytes(data) != sum {
		d.refuse(RecordFrozen, rel, fmt.Sprintf("the local copy's SHA-256 %s is not the frozen %s; not published", digest.Bytes(data), sum))
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
		case versionDigest(rel, content) == dg:
			d.known[rel] = docState{rev: e.Revision(), digest: dg}
			return
		case d.ours(h, st):
			// This host's own earlier version, stored though its
			// publication timed out: this one follows it.
			st = docState{rev: e.Revision(), digest: versionDigest(rel, content)}
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
