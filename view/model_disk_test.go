package view

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/protocol"
)

// Changes made directly on disk, by whoever can write the folder: files
// written, renamed, removed, symlinks, hard links and fifos planted,
// directories made and removed. The protocol's own files and the
// directories every view needs are left alone, as the coordinator leaves
// them.

var (
	diskFiles = []string{"docs/a.md", "docs/b.md", "oracle/answer.md", "scratch/x.md", "scratch/y.md", "scratch/sub/z.md",
		"scratch/carol/c.md", "scratch/secret/s.md", "deliverables/extra.md", "notes.md", "x.md", "tmp.swp", "README.md"}
	diskDirs = []string{"scratch/sub", "scratch/carol", "scratch/secret"}
)

// at opens the directory holding rel, never through a symlink, and
// returns it with rel's last name. ok is false when it cannot be
// reached (the model knew).
func (r *run) at(rel string) (int, string, bool) {
	root, err := unix.Open(r.c.folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.failf("open the folder: %v", err)
		return -1, "", false
	}
	defer unix.Close(root)
	dir := parentOf(rel)
	if dir == "" {
		dir = "."
	}
	fd, err := safeio.OpenBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		r.failf("the directory of %s, which the model says is there: %v", rel, err)
		return -1, "", false
	}
	return fd, path.Base(rel), true
}

// disk runs act on the directory holding rel.
func (r *run) disk(rel string, act func(dfd int, name string) error) {
	dfd, name, ok := r.at(rel)
	if !ok {
		return
	}
	defer unix.Close(dfd)
	if err := act(dfd, name); err != nil {
		r.failf("on disk, %s: %v", rel, err)
	}
}

func (r *run) opBacking() {
	names := append(append([]string(nil), diskFiles...), diskDirs...)
	switch r.ch.intn(7) {
	case 0, 1:
		r.diskWrite(r.pick(diskFiles))
	case 2:
		r.diskRename(r.pick(diskFiles), r.pick(diskFiles))
	case 3:
		r.diskSymlink(r.pick(names), r.pick(mLinkTargets))
	case 4:
		r.diskLink(r.pick(diskFiles), r.pick(diskFiles))
	case 5:
		r.diskRemove(r.pick(names))
	default:
		r.diskMake(r.pick(names))
	}
}

func (r *run) diskWrite(rel string) {
	e, exists := r.w.entries[rel]
	if !r.w.reachable(rel) || (exists && e.kind != mFile) {
		return
	}
	data := []byte(strings.Repeat("on disk "+rel+"\n", 1+len(r.log)%3))
	r.note("disk: write %s", rel)
	r.disk(rel, func(dfd int, name string) error {
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, data)
		return err
	})
	if !exists {
		r.w.newFile(rel, data)
		return
	}
	r.w.files[e.id].content = data
	r.w.touch(e.id)
}

func (r *run) diskRename(from, to string) {
	e, ok := r.w.entries[from]
	if !ok || from == to || !r.w.reachable(from) || !r.w.reachable(to) || e.kind == mDir {
		return
	}
	r.note("disk: rename %s -> %s", from, to)
	if old := r.w.entries[to]; old.kind == mFile && e.kind == mFile && old.id == e.id {
		// Two names of one file: rename(2) leaves both.
		r.disk(from, func(int, string) error { return os.Rename(r.c.in(from), r.c.in(to)) })
		return
	}
	src, sname, _ := r.at(from)
	defer unix.Close(src)
	r.disk(to, func(dfd int, name string) error { return unix.Renameat2(src, sname, dfd, name, 0) })
	r.w.drop(to)
	delete(r.w.entries, from)
	r.w.entries[to] = e
	r.w.touch(e.id)
}

func (r *run) diskSymlink(rel, target string) {
	if _, ok := r.w.entries[rel]; ok || !r.w.reachable(rel) {
		return
	}
	r.note("disk: symlink %s -> %s", rel, target)
	r.disk(rel, func(dfd int, name string) error { return unix.Symlinkat(target, dfd, name) })
	r.w.entries[rel] = mentry{kind: mSymlink, target: target}
}

func (r *run) diskLink(from, to string) {
	e := r.w.entries[from]
	if _, taken := r.w.entries[to]; e.kind != mFile || taken || !r.w.reachable(from) || !r.w.reachable(to) {
		return
	}
	r.note("disk: hard link %s -> %s", to, from)
	src, sname, _ := r.at(from)
	defer unix.Close(src)
	r.disk(to, func(dfd int, name string) error { return unix.Linkat(src, sname, dfd, name, 0) })
	r.w.entries[to] = e
	r.w.files[e.id].links++
	r.w.touch(e.id)
}

func (r *run) diskRemove(rel string) {
	e, ok := r.w.entries[rel]
	if !ok || !r.w.reachable(rel) || (e.kind == mDir && !r.w.empty(rel)) {
		return
	}
	r.note("disk: remove %s", rel)
	flags := 0
	if e.kind == mDir {
		flags = unix.AT_REMOVEDIR
	}
	r.disk(rel, func(dfd int, name string) error { return unix.Unlinkat(dfd, name, flags) })
	r.w.drop(rel)
}

// diskMake makes a directory at a directory's name, a fifo at a file's.
func (r *run) diskMake(rel string) {
	if _, ok := r.w.entries[rel]; ok || !r.w.reachable(rel) {
		return
	}
	dir := false
	for _, d := range diskDirs {
		dir = dir || d == rel
	}
	if dir {
		r.note("disk: mkdir %s", rel)
		r.disk(rel, func(dfd int, name string) error { return unix.Mkdirat(dfd, name, 0o755) })
		r.w.entries[rel] = mentry{kind: mDir}
		return
	}
	r.note("disk: mkfifo %s", rel)
	r.disk(rel, func(dfd int, name string) error { return unix.Mkfifoat(dfd, name, 0o644) })
	r.w.entries[rel] = mentry{kind: mFifo}
}

// checkDisk compares the folder with the model after an operation: a
// refused operation changed nothing, an allowed one exactly what the
// model says; the private files are in the views' staging directories,
// one file each.
func (r *run) checkDisk() {
	seen := map[string]bool{}
	staged := 0
	err := filepath.WalkDir(r.c.folder, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.c.folder, p)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == "." || rel == protocol.LockFile || rel == StagingDir:
			return nil
		case strings.HasPrefix(rel, StagingDir+"/"):
			if d.Type().IsRegular() {
				staged++
			}
			return nil
		}
		seen[rel] = true
		r.checkEntry(rel, p, d)
		return nil
	})
	if err != nil {
		r.failf("walk the folder: %v", err)
	}
	for rel := range r.w.entries {
		if !seen[rel] {
			r.failf("%s is not on disk, the model has it", rel)
		}
	}
	want := 0
	for _, a := range r.agents {
		want += len(a.staged)
	}
	if staged != want {
		r.failf("%d private files on disk, the model has %d", staged, want)
	}
}

// checkEntry compares the entry at rel (backing path p) with the model.
func (r *run) checkEntry(rel, p string, d fs.DirEntry) {
	e, ok := r.w.entries[rel]
	if !ok {
		r.failf("%s is on disk (%v), the model does not have it", rel, d.Type())
		return
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		r.failf("stat %s: %v", rel, err)
		return
	}
	kinds := map[uint32]mkind{unix.S_IFREG: mFile, unix.S_IFDIR: mDir, unix.S_IFLNK: mSymlink, unix.S_IFIFO: mFifo}
	if got := kinds[st.Mode&unix.S_IFMT]; got != e.kind {
		r.failf("%s is of kind %d on disk, %d in the model", rel, got, e.kind)
		return
	}
	switch e.kind {
	case mSymlink:
		if t, _ := os.Readlink(p); t != e.target {
			r.failf("%s leads to %q on disk, to %q in the model", rel, t, e.target)
		}
	case mFile:
		f := r.w.files[e.id]
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, f.content) || int(st.Nlink) != f.links {
			r.failf("%s holds %q (%d names) on disk, %q (%d) in the model (%v)", rel, b, st.Nlink, f.content, f.links, err)
		}
	}
}
