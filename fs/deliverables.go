package fs

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
func (f *FS) deliverable(rel string) bool {
	if err := f.log.Refresh(); err != nil {
		slog.Warn("protocol refresh failed", "err", err)
	}
	return underAny(rel, f.log.Deliverables())
}

// underAny reports whether rel is one of paths or a directory holding
// one of them.
func underAny(rel string, paths []string) bool {
	for _, p := range paths {
		if strings.HasPrefix(p, "/") {
			continue // an external deliverable outside the folder
		}
		p = path.Clean(p)
		if p == rel || rel == "" || strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
}
