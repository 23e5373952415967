package protocol

// Deliverables returns the deliverables protocol.json names, the primary
// and the supporting ones, by the paths Snapshot.Frozen keys them with:
// folder-relative and slash-separated, or absolute when an external
// deliverable lies outside the folder. A view keeps them from being
// removed or renamed away, as it keeps the required documents: validate
// fails without them.
func (l *Log) Deliverables() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proto == nil {
		return nil
	}
	var out []string
	add := func(d Deliverable) {
		if d.fileOK && d.File != "" {
			out = append(out, l.frozenKey(l.proto.Ref(d.File)))
		}
	}
	if l.proto.hasPrimary {
		add(l.proto.Primary)
	}
	for _, s := range l.proto.Supporting {
		add(s)
	}
	return out
}
