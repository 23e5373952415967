package view

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// The model of the contract (README, "The filesystem contract"): what a
// folder holds, what each grant shows, reads and writes, and what every
// operation of a view must answer and record. It is written from the
// contract, not from the view's code: its grants match with a few
// pattern forms of their own, and its verdicts follow the contract's
// table. model_test.go drives views and the model side by side.

// mkind is what a name of the model folder holds.
type mkind uint8

const (
	mAbsent mkind = iota
	mFile
	mDir
	mSymlink
	mFifo
)

// mentry is one name of the folder. Files are known by identity (id), so
// that hard links share one content.
type mentry struct {
	kind   mkind
	id     int    // mFile
	target string // mSymlink
}

// mfile is a file's content, its link count, and ver, which moves at
// every change of its content or metadata (what the view calls its
// version).
type mfile struct {
	content []byte
	links   int
	ver     int
}

// world is the model folder.
type world struct {
	entries map[string]mentry
	files   map[int]*mfile
	nextID  int
	frozen  bool // the primary deliverable is frozen
}

// loadWorld reads the folder as it is before the run: the model starts
// from what protocol.Init and the harness made.
func loadWorld(t testing.TB, folder string) *world {
	w := &world{entries: map[string]mentry{}, files: map[int]*mfile{}}
	err := filepath.WalkDir(folder, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(folder, p)
		if rel == "." || rel == protocol.LockFile {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			w.entries[rel] = mentry{kind: mDir}
			return nil
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		w.newFile(rel, b)
		return nil
	})
	require.NoError(t, err)
	return w
}

func (w *world) newFile(rel string, content []byte) {
	w.nextID++
	w.files[w.nextID] = &mfile{content: append([]byte(nil), content...), links: 1}
	w.entries[rel] = mentry{kind: mFile, id: w.nextID}
}

// file is the file at rel, nil for anything else.
func (w *world) file(rel string) *mfile {
	if e := w.entries[rel]; e.kind == mFile {
		return w.files[e.id]
	}
	return nil
}

// touch notes a change of the file at rel (content, metadata, a name
// given or taken).
func (w *world) touch(id int) {
	if f := w.files[id]; f != nil {
		f.ver++
	}
}

// drop removes the name rel, and its file when it was the last name.
func (w *world) drop(rel string) {
	e, ok := w.entries[rel]
	if !ok {
		return
	}
	delete(w.entries, rel)
	if e.kind == mFile {
		f := w.files[e.id]
		f.links--
		f.ver++
	}
}

// reachable reports whether every directory above rel is a directory:
// a missing one, or a symlink in its place, leads nowhere.
func (w *world) reachable(rel string) bool {
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		if w.entries[d].kind != mDir {
			return false
		}
	}
	return true
}

// below lists the names directly in the directory dir.
func (w *world) below(dir string) []string {
	var out []string
	for rel := range w.entries {
		if parentOf(rel) == dir {
			out = append(out, path.Base(rel))
		}
	}
	sort.Strings(out)
	return out
}

// empty reports whether nothing lies below dir.
func (w *world) empty(dir string) bool {
	for rel := range w.entries {
		if strings.HasPrefix(rel, dir+"/") {
			return false
		}
	}
	return true
}

func parentOf(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d
	}
	return ""
}

// mgrant is a grant as the model reads it: patterns of four forms only
// ("**", "dir/**", "*.md" for the folder's top level, and exact names).
type mgrant struct {
	read, forbid, write []string
	revoked             bool
}

func modelGrant(g *grants.Grant) mgrant {
	return mgrant{read: g.MayRead, forbid: g.ForbiddenRead, write: g.MayWrite, revoked: g.Revoked}
}

// matches reports whether pattern pat matches the name rel.
func matches(pat, rel string) bool {
	switch {
	case pat == "**":
		return true
	case strings.HasSuffix(pat, "/**"):
		d := strings.TrimSuffix(pat, "/**")
		return rel == d || strings.HasPrefix(rel, d+"/")
	case pat == "*.md":
		return !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".md")
	}
	return pat == rel
}

// leads reports whether pat may match something below the directory dir.
func leads(pat, dir string) bool {
	switch {
	case pat == "**":
		return true
	case strings.HasSuffix(pat, "/**"):
		d := strings.TrimSuffix(pat, "/**")
		return d == dir || strings.HasPrefix(d, dir+"/") || strings.HasPrefix(dir, d+"/")
	case pat == "*.md":
		return false
	}
	return strings.HasPrefix(pat, dir+"/")
}

func anyMatch(pats []string, rel string, match func(p, rel string) bool) bool {
	for _, p := range pats {
		if match(p, rel) {
			return true
		}
	}
	return false
}

func (g mgrant) blocked(rel string) bool { return g.revoked || anyMatch(g.forbid, rel, matches) }

func (g mgrant) readable(rel string) bool {
	return !g.blocked(rel) && (anyMatch(g.read, rel, matches) || anyMatch(g.write, rel, matches))
}

func (g mgrant) writable(rel string) bool { return !g.blocked(rel) && anyMatch(g.write, rel, matches) }

// visibleName is whether a name whose kind is not known is shown: a
// file the grant reads, or a directory on the way to one.
func (g mgrant) visibleName(rel string) bool {
	if rel == "" {
		return true
	}
	return !g.blocked(rel) && (g.readable(rel) || anyMatch(g.read, rel, leads) || anyMatch(g.write, rel, leads))
}

// mayWriteIn is whether the grant writes something below dir: a new
// file there that it may not write is private to the view.
func (g mgrant) mayWriteIn(dir string) bool {
	switch {
	case g.revoked:
		return false
	case dir == "":
		return len(g.write) > 0
	case g.blocked(dir):
		return false
	}
	return anyMatch(g.write, dir, leads)
}

// linkTarget is the folder-relative name a symlink at rel leads to, and
// false when it leads out of the folder (absolute, above it, or through
// a ".." after a name, which the kernel resolves physically).
func linkTarget(rel, target string) (string, bool) {
	if strings.HasPrefix(target, "/") {
		return "", false
	}
	var out []string
	if d := parentOf(rel); d != "" {
		out = strings.Split(d, "/")
	}
	named := false
	for _, seg := range strings.Split(target, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) == 0 || named {
				return "", false
			}
			out = out[:len(out)-1]
		default:
			out = append(out, seg)
			named = true
		}
	}
	return strings.Join(out, "/"), true
}

// concealed reports whether a view never shows the entry e at rel,
// whatever its grant: a file with several names, a fifo, a symlink
// leading out of the folder or to what g hides.
func (g mgrant) concealed(rel string, e mentry, w *world) bool {
	switch e.kind {
	case mFifo:
		return true
	case mFile:
		return w.files[e.id].links > 1
	case mSymlink:
		t, ok := linkTarget(rel, e.target)
		return !ok || !g.visibleName(t)
	}
	return false
}

// shown reports whether g shows the entry at rel (absent: no).
func (g mgrant) shown(rel string, w *world) bool {
	e, ok := w.entries[rel]
	if !ok || !w.reachable(rel) || g.concealed(rel, e, w) {
		return false
	}
	if e.kind == mDir {
		return g.visibleName(rel)
	}
	return g.readable(rel)
}

// mverdict is what the contract answers an operation: its errno and
// the kind of its refusal record ("" for none).
type mverdict struct {
	errno syscall.Errno
	kind  ledger.Kind
}

var (
	mAllow   = mverdict{}
	mHidden  = mverdict{syscall.ENOENT, ledger.KindDenied}
	mNoEnt   = mverdict{errno: syscall.ENOENT}
	mAccess  = mverdict{syscall.EACCES, ledger.KindDenied}
	mPerm    = mverdict{syscall.EPERM, ledger.KindDenied}
	mFrozen  = mverdict{syscall.EROFS, ledger.KindFrozenRefused}
	mExists  = mverdict{errno: syscall.EEXIST}
	mInvalid = mverdict{errno: syscall.EINVAL}
)

// requiredDoc: can be edited and saved over, never removed or renamed
// away.
func requiredDoc(rel string) bool {
	for _, d := range protocol.ProtocolDocs() {
		if d == rel {
			return true
		}
	}
	return false
}

// isDeliverable: the primary deliverable protocol.json names, and its
// directory.
func isDeliverable(rel string) bool { return rel == primaryRef || rel == path.Dir(primaryRef) }

func (w *world) isFrozen(rel string) bool { return w.frozen && isDeliverable(rel) }
