package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func escReadGrant() *grantsGrant { return nil }

type grantsGrant = struct{}

func TestEscapeExplore(t *testing.T) {
	c := newCollab(t)
	f := c.folder
	must := func(err error) { require.NoError(t, err) }
	must(os.Symlink("oracle/answer.md", filepath.Join(f, "to-oracle.md")))
	must(os.Symlink("/etc/passwd", filepath.Join(f, "to-passwd")))
	must(os.MkdirAll(filepath.Join(f, "scratch/private"), 0o755))
	must(os.WriteFile(filepath.Join(f, "scratch/private/notes.md"), []byte("p"), 0o644))
	must(os.Link(filepath.Join(f, "oracle/answer.md"), filepath.Join(f, "hard.md")))
	must(os.Link(filepath.Join(f, "oracle/answer.md"), filepath.Join(f, "scratch/hard-w.md")))
	g := reviewerGrant()
	g.MayRead = []string{"**"}
	g.MayWrite = append(g.MayWrite, "scratch/**")
	v := c.mountView(g)
	p := v.path
	log := func(what string, err error) { t.Logf("%-40s -> %v", what, err) }
	b, err := os.ReadFile(p("scratch/hard-w.md"))
	log("read scratch/hard-w.md "+string(b), err)
	var st unix.Stat_t
	must(unix.Stat(p(""), &st))
	t.Logf("root nlink %d", st.Nlink)
	must(unix.Stat(p("scratch"), &st))
	t.Logf("scratch nlink %d size %d", st.Nlink, st.Size)
	// ioctl
	fd, err := unix.Open(p("proposal.md"), unix.O_RDONLY, 0)
	must(err)
	_, err = unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	log("ioctl getflags ro", err)
	err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0x10)
	log("ioctl setflags ro", err)
	_, err = unix.Mmap(fd, 0, 10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	log("mmap shared ro", err)
	err = unix.Fallocate(fd, 0, 0, 100)
	log("fallocate ro", err)
	err = unix.Ftruncate(fd, 0)
	log("ftruncate ro", err)
	// copy_file_range into ro
	src, _ := unix.Open(p("review.md"), unix.O_RDONLY, 0)
	_, err = unix.CopyFileRange(src, nil, fd, nil, 10, 0)
	log("cfr into ro fd", err)
	unix.Close(fd)
	// open_by_handle_at
	h, mid, err := unix.NameToHandleAt(unix.AT_FDCWD, p("oracle/answer.md"), 0)
	log("name_to_handle hidden", err)
	h, mid, err = unix.NameToHandleAt(unix.AT_FDCWD, p("proposal.md"), 0)
	log("name_to_handle visible", err)
	if err == nil {
		t.Logf("handle type %d bytes %x mid %d", h.Type(), h.Bytes(), mid)
		mfd, _ := unix.Open(p(""), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		hfd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY)
		log("open_by_handle visible", err)
		unix.Close(hfd)
		var ost unix.Stat_t
		must(unix.Stat(filepath.Join(f, "oracle/answer.md"), &ost))
		bb := h.Bytes()
		t.Logf("oracle ino %d", ost.Ino)
		_ = bb
	}
	hb, _, err := unix.NameToHandleAt(unix.AT_FDCWD, filepath.Join(f, "oracle/answer.md"), 0)
	log("backing handle", err)
	mfd, _ := unix.Open(p(""), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	_, err = unix.OpenByHandleAt(mfd, hb, unix.O_RDONLY)
	log("open_by_handle backing handle on view", err)
	// setxattr
	log("setxattr ro", unix.Setxattr(p("proposal.md"), "user.x", []byte("1"), 0))
	log("setxattr hidden", unix.Setxattr(p("oracle/answer.md"), "user.x", []byte("1"), 0))
	_, err = unix.Getxattr(p("oracle/answer.md"), "user.x", make([]byte, 10))
	log("getxattr hidden", err)
	log("mkdir scratch/private", os.Mkdir(p("scratch/private"), 0o755))
	log("le", nil); t.Log(readFile(t, p(".acpfs/last-error")))
	log("mkdir .acpfs", os.Mkdir(p(".acpfs"), 0o755))
	log("touch .acpfs/x", escOpen(p(".acpfs/x"), os.O_CREATE|os.O_WRONLY))
	log("rm .acpfs/status", os.Remove(p(".acpfs/status")))
	log("mv .acpfs", os.Rename(p(".acpfs"), p("scratch/x")))
	log("trunc .acpfs/last-error", os.Truncate(p(".acpfs/last-error"), 0))
	log("write .acpfs/status", escOpen(p(".acpfs/status"), os.O_WRONLY))
	log("chmod .acpfs/status", os.Chmod(p(".acpfs/status"), 0o777))
	log("long 255", escOpen(p(strings.Repeat("a", 255)), os.O_RDONLY))
	log("long 256", escOpen(p(strings.Repeat("a", 256)), os.O_RDONLY))
	log("create long 255 scratch", escOpen(p("scratch/"+strings.Repeat("a", 255)), os.O_CREATE|os.O_WRONLY))
	log("rename exchange hidden", unix.Renameat2(unix.AT_FDCWD, p("scratch/hard-w.md"), unix.AT_FDCWD, p("scratch/private"), unix.RENAME_EXCHANGE))
	log("rename exchange ro", unix.Renameat2(unix.AT_FDCWD, p("review.md"), unix.AT_FDCWD, p("proposal.md"), unix.RENAME_EXCHANGE))
	out, code := v.sh("cd deliverables && cat ../oracle/answer.md; ls -la; ls -la ..; stat ../oracle")
	t.Log(code, out)
	// mmap private write ro
	fd, _ = unix.Open(p("proposal.md"), unix.O_RDONLY, 0)
	m, err := unix.Mmap(fd, 0, 10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	log("mmap private", err)
	if err == nil { m[0] = 'X'; unix.Munmap(m) }
	_ = syscall.EIO
	for _, r := range c.records() { t.Logf("%s %s %q %q", r.Kind, r.Op, r.Path, r.Detail) }
}
