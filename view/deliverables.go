package view

import (
	"log/slog"
	"path"
	"strings"
)

// deliverable reports whether rel is a deliverable protocol.json names
// (primary or supporting) or a directory on the way to one. Like the
// required documents, such a file can be edited and saved over (a rename
// onto it), never removed or renamed away: validate fails without it,
// and moving its directory moves it too. The set follows protocol.json,
// read afresh at each removal or rename.
func (f *View) deliverable(rel string) bool {
	if err := f.log.Refresh(); err != nil {
		slog.Warn("protocol refresh failed", "err", err)
	}
	return underAny(rel, f.log.Deliverables(), f.loc)
}

// underAny reports whether rel is one of paths (keys of
// protocol.Snapshot.Frozen) or a directory holding one of them.
func underAny(rel string, paths []string, at place) bool {
	for _, p := range paths {
		p = at.keyName(p)
		if strings.HasPrefix(p, "/") {
			continue // an external deliverable this view does not show
		}
		p = path.Clean(p)
		if p == rel || aboveFolder(rel) || strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
}
