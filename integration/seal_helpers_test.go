package integration

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

// The seal suite plays a hostile backing folder: another process renames,
// plants and swaps names under a live view while the agent holds
// descriptors into it. Whatever the names do, the view must show and
// change only what the grant allows where the names are now. Helpers
// carry a "seal" prefix; the oracle's content is escSecret.

// sealGrant reads everything but the oracle and *.hidden files, and
// writes below deliverables/ and scratch/.
func sealGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-seal", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       []string{"**"},
		ForbiddenRead: []string{"oracle/**", "**/*.hidden"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "deliverables/**", "scratch/**"},
	}
}

// sealHide hides one more absolute directory from the view, as the run
// directory is when it lies inside the folder.
func sealHide(dir string) viewOpt {
	return func(cfg *mount.Config) { cfg.Hidden = append(cfg.Hidden, dir) }
}

// sealSub is c seen from the subtest t: a view it mounts is unmounted at
// the end of t, and its failures are reported by t.
func sealSub(c *collab, t *testing.T) *collab {
	cc := *c
	cc.t = t
	return &cc
}

// sealPlantMoved is the attack of the issue: on the backing folder, a
// symlink to target is planted at a place from where target is a visible
// path, then renamed to `to`, from where the same target leads somewhere
// hidden or out of the folder.
func sealPlantMoved(t *testing.T, folder, to, target string) {
	t.Helper()
	from := sealVisibleFrom(to, target)
	require.NoError(t, os.MkdirAll(filepath.Join(folder, path.Dir(from)), 0o755))
	require.NoError(t, os.Symlink(target, filepath.Join(folder, from)))
	require.NoError(t, os.MkdirAll(filepath.Join(folder, path.Dir(to)), 0o755))
	require.NoError(t, os.Rename(filepath.Join(folder, from), filepath.Join(folder, to)))
}

// sealVisibleFrom returns where a link with target, bound for `to`, must
// first be planted so that target stays below to's directory: one
// directory "a" deeper for each leading "../". For to
// "deliverables/s1" and target "../oracle/answer.md" it is
// "deliverables/a/s1", as in the issue.
func sealVisibleFrom(to, target string) string {
	ups := 0
	for rest := target; strings.HasPrefix(rest, "../"); rest = rest[3:] {
		ups++
	}
	return path.Join(path.Dir(to), strings.Repeat("a/", ups), path.Base(to))
}

// sealOpen opens p with flag and returns the error. What a successful
// open reads must hold no secret; the caller judges the success itself.
func sealOpen(t *testing.T, p string, flag int) error {
	t.Helper()
	fd, err := unix.Open(p, flag|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	b := make([]byte, 4096)
	n, _ := unix.Pread(fd, b, 0)
	got := string(b[:max(n, 0)])
	assert.NotContains(t, got, escSecret, "open %s read a secret", p)
	t.Logf("open(%s, %#x) succeeded, read %q", p, flag, got)
	return nil
}

// sealErrno fails unless err is one of the errnos allowed.
func sealErrno(t *testing.T, err error, what string, allowed ...syscall.Errno) {
	t.Helper()
	if !assert.Error(t, err, "%s succeeded", what) {
		return
	}
	var e syscall.Errno
	if assert.ErrorAs(t, err, &e, "%s: not an errno: %v", what, err) {
		assert.Truef(t, slices.Contains(allowed, e), "%s: %v (%d), want one of %v", what, e, int(e), allowed)
	}
}

// sealRequireHiddenLink checks that the symlink at link (relative to the
// view mnt) is hidden and changes nothing, wherever it points. into, when
// set, is the backing directory a directory link leads to: nothing may
// be read, created or made below the link, and nothing may appear there.
// When settle is set, the kernel knew the name before it was swapped: the
// attempts below it are made at once, and the name itself is checked once
// the view has dropped it.
func sealRequireHiddenLink(t *testing.T, mnt, link, into string, settle bool) {
	t.Helper()
	p := filepath.Join(mnt, link)
	base := filepath.Base(link)

	// The attack: open for writing, creating if need be. A name the
	// kernel still caches as the directory it was may be answered by the
	// kernel itself (EISDIR), which tells nothing the agent did not know.
	allowed := []syscall.Errno{unix.ENOENT, unix.EACCES}
	if settle && into != "" {
		allowed = append(allowed, unix.EISDIR)
	}
	sealErrno(t, sealOpen(t, p, unix.O_RDWR|unix.O_CREAT), "open O_RDWR|O_CREAT", allowed...)
	if into != "" {
		newFile, newDir := "new-"+base+".md", "dir-"+base
		sealErrno(t, sealOpen(t, filepath.Join(p, "answer.md"), unix.O_RDONLY), "open below", unix.ENOENT)
		sealErrno(t, sealOpen(t, filepath.Join(p, newFile), unix.O_WRONLY|unix.O_CREAT), "create below",
			unix.ENOENT, unix.EACCES)
		sealErrno(t, unix.Mkdir(filepath.Join(p, newDir), 0o755), "mkdir below", unix.ENOENT, unix.EACCES)
		for _, n := range []string{newFile, newDir} {
			_, err := os.Lstat(filepath.Join(into, n))
			assert.ErrorIs(t, err, os.ErrNotExist, "%s appeared in %s", n, into)
		}
	}

	// The name itself.
	if settle {
		eventually(t, func() bool {
			var st unix.Stat_t
			return unix.Lstat(p, &st) == unix.ENOENT
		}, link+" is still visible")
	}
	var st unix.Stat_t
	sealErrno(t, unix.Lstat(p, &st), "lstat", unix.ENOENT)
	sealErrno(t, unix.Stat(p, &st), "stat", unix.ENOENT)
	_, err := unix.Readlink(p, make([]byte, 4096))
	sealErrno(t, err, "readlink", unix.ENOENT)
	sealErrno(t, sealOpen(t, p, unix.O_RDONLY), "open O_RDONLY", unix.ENOENT)
	sealErrno(t, sealOpen(t, p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL), "open O_CREAT|O_EXCL",
		unix.ENOENT, unix.EACCES)
	sealErrno(t, unix.Mkdir(p, 0o755), "mkdir", unix.ENOENT, unix.EACCES)
	assert.NotContains(t, escGetdents(t, filepath.Join(mnt, filepath.Dir(link))), base, "listed")
}

// sealDirent is one entry returned by getdents64: its name and d_off,
// the position from which the listing resumes after it.
type sealDirent struct {
	name string
	off  int64
}

// sealReaddir lists dir with raw getdents64 from position from (0: the
// start), with the offsets the view hands out.
func sealReaddir(t *testing.T, dir string, from int64) []sealDirent {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = unix.Seek(fd, from, io.SeekStart)
	require.NoError(t, err)
	var out []sealDirent
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		// struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen,
		// u8 d_type, then the NUL-terminated name.
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			name = name[:bytes.IndexByte(name, 0)]
			out = append(out, sealDirent{name: string(name), off: int64(binary.NativeEndian.Uint64(b[8:16]))})
			b = b[reclen:]
		}
	}
}

func sealNames(ents []sealDirent) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.name)
	}
	return out
}

// sealDirAttrs are the attributes of a directory that move with its
// entries on disk, as stat and statx report them.
type sealDirAttrs struct {
	Size, Blocks   int64
	Nlink          uint64
	Mtime, Ctime   unix.Timespec
	XSize, XBlocks uint64
	XNlink         uint32
	XMtime, XCtime unix.StatxTimestamp
}

func sealDirStat(t *testing.T, p string) sealDirAttrs {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	var sx unix.Statx_t
	require.NoError(t, unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_BASIC_STATS, &sx))
	return sealDirAttrs{
		Size: st.Size, Blocks: st.Blocks, Nlink: st.Nlink, Mtime: st.Mtim, Ctime: st.Ctim,
		XSize: sx.Size, XBlocks: sx.Blocks, XNlink: sx.Nlink, XMtime: sx.Mtime, XCtime: sx.Ctime,
	}
}

// sealHasRead reports whether recs hold a read record of rel.
func sealHasRead(recs []ledger.Record, rel string) bool {
	for _, r := range recs {
		if (r.Kind == ledger.KindRead || r.Kind == ledger.KindReadRequest) && r.Path == rel {
			return true
		}
	}
	return false
}

// sealChild is a Python program in another process that stops at a
// barrier: it prints "ready" once its first step is done, and goes on
// when resume is called. Mapped memory of a served file is only touched
// in such a child (see escMapper); escPython runs a program to its end
// and cannot wait for the test in between.
type sealChild struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testutil.SyncBuffer
	done   bool
}

// sealStartChild starts prog; call ready before relying on its first
// step. Children started together start in parallel.
func sealStartChild(t *testing.T, prog string, args ...string) *sealChild {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", prog}, args...)...)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	ch := &sealChild{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &testutil.SyncBuffer{}}
	cmd.Stderr = ch.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if !ch.done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return ch
}

// ready waits until the child has printed "ready".
func (ch *sealChild) ready(t *testing.T) {
	t.Helper()
	line, err := ch.out.ReadString('\n')
	require.NoError(t, err, "child: %s", ch.stderr.String())
	require.Equal(t, "ready\n", line, "child: %s", ch.stderr.String())
}

// resume lets the child go on and returns the rest of its output and how
// it exited.
func (ch *sealChild) resume() (string, error) {
	_, _ = io.WriteString(ch.in, "go\n")
	ch.in.Close()
	rest, _ := io.ReadAll(ch.out)
	ch.done = true
	err := ch.cmd.Wait()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, ch.stderr.String())
	}
	return string(rest), err
}

// sealMapProg maps argv[1] (opened read-only, or read-write for "rw")
// shared and readable, says ready, and once resumed reads the first 64
// bytes of the mapping. A failed page fault kills it with SIGBUS.
const sealMapProg = `import mmap, os, sys
flags = os.O_RDWR if sys.argv[2] == "rw" else os.O_RDONLY
fd = os.open(sys.argv[1], flags)
m = mmap.mmap(fd, 64, mmap.MAP_SHARED, mmap.PROT_READ)
print("ready", flush=True)
sys.stdin.readline()
print("data", m[0:64].hex(), flush=True)
`

// sealMapping is a child holding the mapping of sealMapProg.
type sealMapping struct{ *sealChild }

// sealMap maps path in a child (mode "r" or "rw"); call ready before
// relying on the mapping.
func sealMap(t *testing.T, path, mode string) sealMapping {
	t.Helper()
	return sealMapping{sealStartChild(t, sealMapProg, path, mode)}
}

// read lets the child read its mapping and returns what it read.
func (m sealMapping) read() ([]byte, error) {
	out, err := m.resume()
	if err != nil {
		return nil, err
	}
	h, ok := strings.CutPrefix(strings.TrimSpace(out), "data ")
	if !ok {
		return nil, fmt.Errorf("child: %q", out)
	}
	return hex.DecodeString(h)
}
