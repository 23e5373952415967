package store

// The documents' sync: applying what the bucket holds (values, deletions, conflicts).

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/ledger"
)

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
			d.known[rel] = docState{rev: e.Revision(), digest: versionDigest(rel, content)}
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
	dg := versionDigest(rel, content)
	if sum, ok := d.frozen(rel); ok && h.SHA256 != sum {
		d.refuse(RecordFrozen, rel, fmt.Sprintf("revision %d by %s has SHA-256 %s, not the frozen %s; not applied", rev, h.Host, h.SHA256, sum))
		return
	}
	local, _, err := d.root.ReadFile(rel, d.limit())
	if err == nil && versionDigest(rel, local) == dg {
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
	dg := versionDigest(rel, det.Content)
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
			dg := versionDigest(rel, old.Content)
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
	sum := digest.Bytes(data)
	name := conflictName(rel, d.s.Host(), sum[:12])
	slog.Warn("documents: conflicting versions; both kept", "path", rel, "kept_as", name, "why", why)
	d.record(RecordConflict, rel, why+"; that version is kept as "+name)
	if st := d.known[name]; !st.live() || st.digest != sum {
		ctx, cancel := d.s.ctx()
		rev, err := d.s.docs.Create(ctx, keyOf(name), d.encode(name, data, mode, 0, rel))
		if isCAS(err) {
			if e, gerr := d.s.docs.Get(ctx, keyOf(name)); gerr == nil {
				if _, content, derr := decodeDoc(e.Value(), name); derr == nil && digest.Bytes(content) == sum {
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
	hist, err := d.history(rel)
	if err != nil {
		return false
	}
	for _, e := range hist {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if _, content, err := decodeDoc(e.Value(), rel); err == nil && versionDigest(rel, content) == dg {
			return true
		}
	}
	return false
}

// refuse logs and records a refusal, once: the bucket's entries are
// replayed at every reconnection, and a scan meets the same file again.
func (d *Docs) refuse(kind ledger.Kind, rel, detail string) {
	k := string(kind) + "\x00" + rel + "\x00" + detail
	if d.refused[k] {
		return
	}
	d.refused[k] = true
	slog.Warn("documents: "+string(kind), "path", rel, "detail", detail)
	d.record(kind, rel, detail)
}

func (d *Docs) record(kind ledger.Kind, rel, detail string) {
	if d.opts.Record != nil {
		d.opts.Record(kind, rel, detail)
	}
}

func (d *Docs) changed(rel string) {
	if d.opts.Changed != nil {
		d.opts.Changed(rel)
	}
}
