package mount

import (
	"errors"
	"fmt"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
)

// relHidden is where the entries of abs lie in folder (for the matcher
// and the watcher, which work with folder-relative names). An entry that
// cannot be located is left to the view's identity check.
func relHidden(folder string, abs []string) []string {
	found, err := fsid.LocateIn(folder, abs)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(found))
	for _, c := range found {
		out = append(out, c.Rel)
	}
	return out
}

// ErrShowsConcealed marks a grant refused because it would show what no
// view may show.
var ErrShowsConcealed = errors.New("a grant would show what no view may show")

// CheckConcealed refuses a grant that would show something no view may
// show, lying inside the folder (a run directory inside the folder and a
// grant reading "**", say). Views conceal such entries by identity all
// the same; refusing first tells the coordinator before any agent runs.
func CheckConcealed(folder string, hidden []string, g *grants.Grant) error {
	found, err := fsid.LocateIn(folder, hidden)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	m, err := grants.Compile(g, grants.MatcherOptions{})
	if err != nil {
		return err
	}
	for _, c := range found {
		if m.Visible(c.Rel) {
			return &showsConcealed{fmt.Sprintf("%s lies inside the collaboration folder (at %s) and grant %s would show it (%s); move it out of the folder or add %q to the grant's forbidden_read",
				c.Path, c.Rel, g.GrantID, m.Explain(c.Rel).Rule, c.Rel)}
		}
	}
	return nil
}

// showsConcealed is an ErrShowsConcealed with its one line.
type showsConcealed struct{ msg string }

func (e *showsConcealed) Error() string        { return e.msg }
func (e *showsConcealed) Is(target error) bool { return target == ErrShowsConcealed }
