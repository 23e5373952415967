package store

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/acpfs/acpfs/protocol"
)

// The documents the views never let anyone remove, and protocol.json,
// which never changes once the collaboration exists, must not change
// through the sync either: a disk edit on one host, or a value written
// to the bucket by something that is not an acpfs host, would otherwise
// reach every host. See docs/multihost.md, "Documents".

// protected says why rel is never removed (the sync neither publishes
// nor applies its removal), or "" when it may be removed.
func (d *Docs) protected(rel string) string {
	if rel == protocolJSON || slices.Contains(protocol.ProtocolDocs(), rel) {
		return "a document every collaboration holds"
	}
	if _, ok := d.frozen(rel); ok {
		return "a frozen deliverable"
	}
	return ""
}

// restore writes rel back into the folder from the bucket's history
// (see pick). When that is not the key's last revision (a removal, or a
// version of a frozen deliverable that is not the frozen one, came
// after it), it is published again over it; protocol.json never is.
func (d *Docs) restore(rel string) {
	hist, err := d.history(rel)
	if err != nil {
		slog.Warn("documents: write back a document that is never removed", "path", rel, "err", err)
		return
	}
	e, h, content, ok := d.pick(rel, hist)
	if !ok {
		slog.Warn("documents: the store holds no version to write back", "path", rel)
		return
	}
	d.applyValue(rel, e.Revision(), h, content)
	last := hist[len(hist)-1].Revision()
	if rel == protocolJSON || e.Revision() == last || d.known[rel].rev != e.Revision() {
		return
	}
	d.known[rel] = docState{rev: last, deleted: true}
	d.local(rel)
}

// historyTries paces the attempts to read a key's history: during a
// failover a request fails until a leader is elected, and a version
// wrongly thought unknown would be kept as a conflict copy.
var historyTries = []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, time.Second}

// history is every revision of rel the bucket keeps, oldest first.
func (d *Docs) history(rel string) ([]jetstream.KeyValueEntry, error) {
	var hist []jetstream.KeyValueEntry
	var err error
	for _, wait := range historyTries {
		time.Sleep(wait) // a back-off between attempts
		if !d.s.Connected() {
			return nil, fmt.Errorf("history of %s: %w", rel, ErrOffline)
		}
		ctx, cancel := d.s.ctx()
		hist, err = d.s.docs.History(ctx, keyOf(rel))
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", rel, offline(err))
	}
	if len(hist) == 0 {
		return nil, fmt.Errorf("history of %s: %w", rel, jetstream.ErrKeyNotFound)
	}
	return hist, nil
}

// pick chooses the version of rel to keep among hist: for protocol.json
// the first valid one (the collaboration's), for a frozen deliverable
// the last with the frozen SHA-256, else the last valid one.
func (d *Docs) pick(rel string, hist []jetstream.KeyValueEntry) (jetstream.KeyValueEntry, docHeader, []byte, bool) {
	sum, frozen := d.frozen(rel)
	n := len(hist)
	for i := range n {
		e := hist[n-1-i]
		if rel == protocolJSON {
			e = hist[i]
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		h, content, err := decodeDoc(e.Value(), rel)
		if err != nil || (frozen && h.SHA256 != sum) {
			continue
		}
		return e, h, content, true
	}
	return nil, docHeader{}, nil, false
}

// applyProtocol takes a revision of protocol.json from the bucket. Only
// the first revision the bucket holds is the collaboration's: a later
// one (published by a host that does not refuse edits of the static
// part, or written to the bucket by other means) or a removal is never
// applied, and a host that starts takes the first even when a later one
// is the last.
func (d *Docs) applyProtocol(e jetstream.KeyValueEntry, st docState) {
	if st.rev == 0 {
		if !d.adoptProtocol() {
			return
		}
		st = d.known[protocolJSON]
	}
	if e.Revision() <= st.rev {
		return
	}
	what := "revision"
	if e.Operation() != jetstream.KeyValuePut {
		what = "removal"
	}
	d.refuse(RecordRefused, protocolJSON, fmt.Sprintf("the %s at revision %d is not applied: protocol.json never changes once the collaboration exists (revision %d)", what, e.Revision(), st.rev))
}

// adoptProtocol makes the bucket's first revision of protocol.json the
// one this host knows, and writes it if the folder has none. It reports
// whether there is one.
func (d *Docs) adoptProtocol() bool {
	hist, err := d.history(protocolJSON)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		slog.Warn("documents: read protocol.json from the store", "err", err)
		return false
	}
	e, h, content, ok := d.pick(protocolJSON, hist)
	if !ok {
		d.refuse(RecordRefused, protocolJSON, fmt.Sprintf("none of the %d revisions of protocol.json in the store is valid", len(hist)))
		return false
	}
	d.applyValue(protocolJSON, e.Revision(), h, content)
	return d.known[protocolJSON].rev == e.Revision()
}

// publishProtocol publishes this host's protocol.json only to create
// the collaboration's: once the bucket has one, a static part that
// differs here is refused (once per content), never published.
func (d *Docs) publishProtocol(data []byte, mode uint32, dg string, st docState) {
	if st.rev == 0 {
		ctx, cancel := d.s.ctx()
		rev, err := d.s.docs.Create(ctx, keyOf(protocolJSON), d.encode(protocolJSON, data, mode, 0, ""))
		cancel()
		switch {
		case err == nil:
			d.known[protocolJSON] = docState{rev: rev, digest: dg}
			return
		case !isCAS(err):
			slog.Warn("documents: publish", "path", protocolJSON, "err", offline(err))
			return
		case !d.adoptProtocol():
			return
		}
		st = d.known[protocolJSON]
		if st.digest == dg {
			return
		}
	}
	d.refuse(RecordRefused, protocolJSON, fmt.Sprintf("this host's protocol.json (%s) differs from the collaboration's (revision %d) beyond the fields the history derives; protocol.json never changes once the collaboration exists: not published", dg, st.rev))
}
