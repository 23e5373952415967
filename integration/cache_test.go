package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	acpfsfs "github.com/acpfs/acpfs/view"
)

// The kernel keeps what a view showed (entries, attributes, listings,
// pages) for fs.CacheTimeout. These tests prove that it does, and that
// every path that changes what a view shows reaches it at once.

// asks counts the requests a view's daemon receives, by operation and
// path, through the fault hook every handler calls first.
type asks struct {
	mu sync.Mutex
	n  map[string]int
}

func newAsks() *asks { return &asks{n: map[string]int{}} }

func (a *asks) hook(op, rel string) {
	a.mu.Lock()
	a.n[op+" "+rel]++
	a.mu.Unlock()
}

// during returns the requests made while fn ran.
func (a *asks) during(fn func()) map[string]int {
	a.mu.Lock()
	a.n = map[string]int{}
	a.mu.Unlock()
	fn()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.n
	a.n = map[string]int{}
	return out
}

// only keeps the requests of the given operations.
func only(m map[string]int, ops ...string) []string {
	var out []string
	for k := range m {
		if slices.Contains(ops, strings.SplitN(k, " ", 2)[0]) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// names lists dir through the view (getdents), sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// look does what `ls -lR` does to a tree: list every directory and stat
// every entry, without reading any file.
func look(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		st, err := os.Lstat(p)
		require.NoError(t, err)
		if st.IsDir() {
			look(t, p)
		}
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func TestKernelKeepsWhatTheViewShowed(t *testing.T) {
	c := newCollab(t)
	writeFiles(t, c.folder, map[string]string{"scratch/a.md": "a\n", "scratch/sub/b.md": "b\n", "scratch/private/p.md": "p\n"})
	a := newAsks()
	v := c.mountView(reviewerGrant(), withFault(a.hook), withAuditOpens())
	look(t, v.path("scratch")) // warm
	_, err := os.ReadFile(v.path("scratch/a.md"))
	require.NoError(t, err)

	got := a.during(func() {
		look(t, v.path("scratch"))
		b, err := os.ReadFile(v.path("scratch/a.md"))
		require.NoError(t, err)
		assert.Equal(t, "a\n", string(b))
	})
	assert.Empty(t, only(got, "lookup", "readdir"), "a warm listing is answered by the kernel")
	// The kernel asks again only for the access time of what was read
	// or listed since it last asked (it invalidates atime after each
	// read and listing).
	assert.Subset(t, []string{"getattr scratch/a.md", "getattr scratch/sub"}, only(got, "getattr"))
	// Opens always reach the daemon: the grant is checked and the read
	// recorded every time.
	assert.Equal(t, 1, got["opendir scratch"])
	assert.Equal(t, 1, got["open scratch/a.md"])
	reads := 0
	for _, r := range c.records() {
		if r.Kind == ledger.KindRead && r.Path == "scratch/a.md" {
			reads++
		}
	}
	assert.Equal(t, 2, reads, "each open of the file is recorded")

	// The protocol files' attributes are never kept: their size moves
	// with every append.
	got = a.during(func() {
		for _, f := range []string{"events.jsonl", "protocol.json"} {
			_, err := os.Stat(v.path(f))
			require.NoError(t, err)
		}
	})
	assert.Equal(t, []string{"getattr events.jsonl", "getattr protocol.json"}, only(got, "getattr"))
}

func TestCachedViewSeesChangesOnDisk(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	disk := func(rel string) string { return filepath.Join(c.folder, rel) }
	stat := func(rel string) (os.FileInfo, error) { return os.Lstat(v.path(rel)) }
	tests := []struct {
		name   string
		files  map[string]string // made before the view is warmed
		change func(t *testing.T)
		shown  func(t *testing.T) bool // true once the view shows the change
	}{
		{name: "content grows", files: map[string]string{"scratch/grow.md": "short\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.WriteFile(disk("scratch/grow.md"), []byte("a longer content\n"), 0o644))
			},
			shown: func(t *testing.T) bool {
				st, err := stat("scratch/grow.md")
				b, rerr := os.ReadFile(v.path("scratch/grow.md"))
				return err == nil && rerr == nil && st.Size() == 17 && string(b) == "a longer content\n"
			}},
		{name: "chmod", files: map[string]string{"scratch/mode.md": "m\n"},
			change: func(t *testing.T) { require.NoError(t, os.Chmod(disk("scratch/mode.md"), 0o600)) },
			shown: func(t *testing.T) bool {
				st, err := stat("scratch/mode.md")
				return err == nil && st.Mode().Perm() == 0o600
			}},
		{name: "utimes", files: map[string]string{"scratch/times.md": "t\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.Chtimes(disk("scratch/times.md"), time.Unix(1e9, 0), time.Unix(1e9, 0)))
			},
			shown: func(t *testing.T) bool {
				st, err := stat("scratch/times.md")
				return err == nil && st.ModTime().Equal(time.Unix(1e9, 0))
			}},
		{name: "new file in a listed directory", files: map[string]string{"scratch/new/keep.md": "k\n"},
			change: func(t *testing.T) { writeFiles(t, c.folder, map[string]string{"scratch/new/added.md": "x\n"}) },
			shown: func(t *testing.T) bool {
				_, err := stat("scratch/new/added.md")
				return err == nil && slices.Equal(names(t, v.path("scratch/new")), []string{"added.md", "keep.md"})
			}},
		{name: "new file two directories down", files: map[string]string{"scratch/deep/er/keep.md": "k\n"},
			change: func(t *testing.T) { writeFiles(t, c.folder, map[string]string{"scratch/deep/er/est/added.md": "x\n"}) },
			shown: func(t *testing.T) bool {
				return slices.Equal(names(t, v.path("scratch/deep/er")), []string{"est", "keep.md"}) &&
					slices.Equal(names(t, v.path("scratch/deep/er/est")), []string{"added.md"})
			}},
		{name: "removed file", files: map[string]string{"scratch/gone/x.md": "x\n", "scratch/gone/y.md": "y\n"},
			change: func(t *testing.T) { require.NoError(t, os.Remove(disk("scratch/gone/x.md"))) },
			shown: func(t *testing.T) bool {
				_, err := stat("scratch/gone/x.md")
				return errors.Is(err, syscall.ENOENT) && slices.Equal(names(t, v.path("scratch/gone")), []string{"y.md"})
			}},
		{name: "renamed file", files: map[string]string{"scratch/mv/old.md": "o\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.Rename(disk("scratch/mv/old.md"), disk("scratch/mv/new.md")))
			},
			shown: func(t *testing.T) bool {
				_, err := stat("scratch/mv/old.md")
				b, rerr := os.ReadFile(v.path("scratch/mv/new.md"))
				return errors.Is(err, syscall.ENOENT) && rerr == nil && string(b) == "o\n" &&
					slices.Equal(names(t, v.path("scratch/mv")), []string{"new.md"})
			}},
		{name: "directory swapped by renames", files: map[string]string{"scratch/swap/d1/x.md": "x\n", "scratch/swap/d2/y.md": "y\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.Rename(disk("scratch/swap/d1"), disk("scratch/swap/d0")))
				require.NoError(t, os.Rename(disk("scratch/swap/d2"), disk("scratch/swap/d1")))
			},
			shown: func(t *testing.T) bool {
				b, err := os.ReadFile(v.path("scratch/swap/d1/y.md"))
				return err == nil && string(b) == "y\n" && slices.Equal(names(t, v.path("scratch/swap/d1")), []string{"y.md"})
			}},
		{name: "symlink retargeted at a hidden file", files: map[string]string{"scratch/ln/target.md": "t\n", "scratch/private/secret.md": "s\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.Symlink("../private/secret.md", disk("scratch/ln/tmp-link")))
				require.NoError(t, os.Rename(disk("scratch/ln/tmp-link"), disk("scratch/ln/link")))
			},
			shown: func(t *testing.T) bool {
				_, err := stat("scratch/ln/link")
				return errors.Is(err, syscall.ENOENT) && slices.Equal(names(t, v.path("scratch/ln")), []string{"target.md"})
			}},
		{name: "hard link made elsewhere in the folder", files: map[string]string{"scratch/hl/file.md": "f\n", "scratch/other/keep.md": "k\n"},
			change: func(t *testing.T) {
				require.NoError(t, os.Link(disk("scratch/hl/file.md"), disk("scratch/other/second.md")))
			},
			shown: func(t *testing.T) bool {
				_, err := stat("scratch/hl/file.md")
				return errors.Is(err, syscall.ENOENT) && len(names(t, v.path("scratch/hl"))) == 0
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFiles(t, c.folder, tt.files)
			if tt.name == "symlink retargeted at a hidden file" {
				require.NoError(t, os.Symlink("target.md", disk("scratch/ln/link")))
			}
			eventually(t, func() bool {
				for rel := range tt.files {
					if strings.Contains(rel, "private/") {
						continue
					}
					if _, err := stat(rel); err != nil {
						return false
					}
				}
				return true
			}, "the files made on disk do not show")
			look(t, v.path("scratch"))
			for rel := range tt.files {
				if !strings.Contains(rel, "private/") {
					_, err := os.ReadFile(v.path(rel))
					require.NoError(t, err)
				}
			}
			tt.change(t)
			eventually(t, func() bool { return tt.shown(t) }, "the view does not show the change")
		})
	}
}

// A directory moved within the folder keeps being watched under its new
// path, and so does everything below it: a change in it afterwards
// reaches the views that keep it.
func TestCachedViewFollowsMovedDirectories(t *testing.T) {
	c := newCollab(t)
	writeFiles(t, c.folder, map[string]string{"scratch/d/sub/f.md": "one\n"})
	v := c.mountView(reviewerGrant())
	look(t, v.path("scratch"))
	require.NoError(t, os.Rename(filepath.Join(c.folder, "scratch/d"), filepath.Join(c.folder, "scratch/e")))
	eventually(t, func() bool {
		b, err := os.ReadFile(v.path("scratch/e/sub/f.md"))
		return err == nil && string(b) == "one\n" && slices.Equal(names(t, v.path("scratch")), []string{"e"})
	}, "the moved directory does not show")
	look(t, v.path("scratch")) // the kernel keeps the new paths
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "scratch/e/sub/f.md"), []byte("two, longer\n"), 0o644))
	writeFiles(t, c.folder, map[string]string{"scratch/e/sub/g.md": "g\n"})
	eventually(t, func() bool {
		st, err := os.Stat(v.path("scratch/e/sub/f.md"))
		return err == nil && st.Size() == 12 && slices.Equal(names(t, v.path("scratch/e/sub")), []string{"f.md", "g.md"})
	}, "a change below a moved directory does not reach the view")
}

// A change that inotify does not report (here a write through a shared
// mapping, made outside any view) is seen at the next open: the file is
// not the version whose attributes and pages the kernel holds.
func TestReopenSeesAChangeInotifyMisses(t *testing.T) {
	c := newCollab(t)
	writeFiles(t, c.folder, map[string]string{"scratch/mapped.md": "before the mapping\n"})
	v := c.mountView(reviewerGrant())
	b, err := os.ReadFile(v.path("scratch/mapped.md"))
	require.NoError(t, err)
	require.Equal(t, "before the mapping\n", string(b))

	fd, err := unix.Open(filepath.Join(c.folder, "scratch/mapped.md"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	m, err := unix.Mmap(fd, 0, 19, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	copy(m, "BEFORE")
	require.NoError(t, unix.Munmap(m))
	require.NoError(t, unix.Close(fd))

	// open and read, no stat: nothing else tells the kernel.
	fd, err = unix.Open(v.path("scratch/mapped.md"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	require.NoError(t, err)
	assert.Equal(t, "BEFORE the mapping\n", string(buf[:n]))
}

func TestCachedViewFollowsGrantChangesAtOnce(t *testing.T) {
	files := map[string]string{
		"scratch/a.md": "a\n", "scratch/c.md": "c\n", "scratch/sub/b.md": "b\n", "notes.md": "n\n",
	}
	tests := []struct {
		name     string
		change   func(g *grants.Grant)
		handoffs func(c *collab) map[string]string
		check    func(t *testing.T, v *view, held *os.File)
	}{
		{name: "a directory taken away", change: func(g *grants.Grant) {
			g.MayRead = slices.DeleteFunc(g.MayRead, func(s string) bool { return s == "scratch/**" })
		}, check: func(t *testing.T, v *view, held *os.File) {
			for _, rel := range []string{"scratch", "scratch/a.md", "scratch/sub/b.md"} {
				_, err := os.Lstat(v.path(rel))
				assert.ErrorIs(t, err, syscall.ENOENT, rel)
			}
			assert.NotContains(t, names(t, v.dir), "scratch")
			_, err := held.ReadAt(make([]byte, 2), 0)
			assert.ErrorIs(t, err, syscall.EACCES, "a descriptor opened before")
		}},
		{name: "one file of a listed directory forbidden", change: func(g *grants.Grant) {
			g.ForbiddenRead = append(g.ForbiddenRead, "scratch/a.md")
		}, check: func(t *testing.T, v *view, held *os.File) {
			_, err := os.Lstat(v.path("scratch/a.md"))
			assert.ErrorIs(t, err, syscall.ENOENT)
			assert.Equal(t, []string{"c.md", "link", "sub"}, names(t, v.path("scratch")))
			_, err = os.ReadFile(v.path("scratch/a.md"))
			assert.ErrorIs(t, err, syscall.ENOENT)
		}},
		{name: "a symlink's target forbidden", change: func(g *grants.Grant) {
			g.ForbiddenRead = append(g.ForbiddenRead, "scratch/c.md")
		}, check: func(t *testing.T, v *view, held *os.File) {
			_, err := os.Lstat(v.path("scratch/link"))
			assert.ErrorIs(t, err, syscall.ENOENT)
			assert.Equal(t, []string{"a.md", "sub"}, names(t, v.path("scratch")))
		}},
		{name: "revoked", change: func(g *grants.Grant) { g.Revoked = true },
			check: func(t *testing.T, v *view, held *os.File) {
				for _, rel := range []string{"scratch", "scratch/a.md", "proposal.md", "protocol.json"} {
					_, err := os.Lstat(v.path(rel))
					assert.ErrorIs(t, err, syscall.ENOENT, rel)
				}
				assert.Empty(t, names(t, v.dir))
				_, err := held.ReadAt(make([]byte, 2), 0)
				assert.ErrorIs(t, err, syscall.EACCES)
			}},
		{name: "widened", change: func(g *grants.Grant) { g.MayRead = append(g.MayRead, "notes.md") },
			check: func(t *testing.T, v *view, held *os.File) {
				assert.Contains(t, names(t, v.dir), "notes.md")
				b, err := os.ReadFile(v.path("notes.md"))
				require.NoError(t, err)
				assert.Equal(t, "n\n", string(b))
			}},
		{name: "a file handed over", handoffs: func(c *collab) map[string]string {
			snap := filepath.Join(c.runs, "artifacts", "snap-a")
			require.NoError(t, os.MkdirAll(filepath.Dir(snap), 0o755))
			require.NoError(t, os.WriteFile(snap, []byte("the handed-over bytes\n"), 0o444))
			return map[string]string{"scratch/a.md": snap}
		}, check: func(t *testing.T, v *view, held *os.File) {
			st, err := os.Stat(v.path("scratch/a.md"))
			require.NoError(t, err)
			assert.EqualValues(t, 22, st.Size())
			b, err := os.ReadFile(v.path("scratch/a.md"))
			require.NoError(t, err)
			assert.Equal(t, "the handed-over bytes\n", string(b))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollab(t)
			writeFiles(t, c.folder, files)
			require.NoError(t, os.Symlink("c.md", filepath.Join(c.folder, "scratch/link")))
			g := reviewerGrant()
			v := c.mountView(g)
			look(t, v.dir)
			for _, rel := range []string{"scratch/a.md", "scratch/link", "proposal.md"} {
				_, err := os.ReadFile(v.path(rel))
				require.NoError(t, err)
			}
			held, err := os.Open(v.path("scratch/a.md"))
			require.NoError(t, err)
			defer held.Close()

			ng := *g
			ng.MayRead = slices.Clone(g.MayRead)
			ng.ForbiddenRead = slices.Clone(g.ForbiddenRead)
			if tt.change != nil {
				tt.change(&ng)
			}
			var handoffs map[string]string
			if tt.handoffs != nil {
				handoffs = tt.handoffs(c)
			}
			// The view applies the grant synchronously: what it
			// showed before must be gone when SetGrant returns.
			require.NoError(t, v.m.FS.SetGrant(&ng, handoffs))
			tt.check(t, v, held)
		})
	}
}

// A freeze changes what a cached entry lets an agent do at once: writes
// are judged when they are made, never from what the kernel keeps.
func TestCachedEntryOfAFrozenDeliverable(t *testing.T) {
	r := newRun(t)
	r.toReadinessCheck()
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("Frozen")), 0o644))
	for _, v := range []*view{r.alice, r.bob} {
		look(t, v.path("deliverables"))
		_, err := os.ReadFile(v.path(primary))
		require.NoError(t, err)
	}
	r.must(r.alice, owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, r.alice.path(primary))})
	_, err := os.OpenFile(r.alice.path(primary), os.O_WRONLY, 0)
	assert.ErrorIs(t, err, syscall.EROFS)
	r.c.requireRecord(ledger.KindFrozenRefused, primary, "open")
	assert.ErrorIs(t, os.Chmod(r.alice.path(primary), 0o600), syscall.EROFS)
	b, err := os.ReadFile(r.bob.path(primary))
	require.NoError(t, err)
	assert.Equal(t, designSpec("Frozen"), string(b))
}

// A large file's open does not wait for its hash: the read is recorded
// with the file's version and its read_hash follows, before the view is
// reported stopped. A later mount takes the hash from the store beside
// the ledger and records it with the read at once.
func TestLargeFileHashFollowsTheRead(t *testing.T) {
	c := newCollab(t)
	big := make([]byte, 24<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	writeFiles(t, c.folder, map[string]string{"scratch/big.bin": string(big)})
	want := fileSHA(t, filepath.Join(c.folder, "scratch/big.bin"))
	// Hashes are kept only for versions whose last change is a second
	// old (a coarse clock could give a change within the same tick the
	// same size and times): let the file reach that age.
	st, err := os.Stat(filepath.Join(c.folder, "scratch/big.bin"))
	require.NoError(t, err)
	for time.Since(st.ModTime()) < 1100*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
	}

	readOnce := func(v *view) {
		f, err := os.Open(v.path("scratch/big.bin"))
		require.NoError(t, err)
		b := make([]byte, 16)
		_, err = f.Read(b)
		require.NoError(t, err)
		assert.Equal(t, big[:16], b)
		require.NoError(t, f.Close())
	}
	v := c.mountView(reviewerGrant(), withAuditOpens())
	readOnce(v)
	require.NoError(t, v.m.Stop())

	var read, hash *ledger.Record
	recs := c.records()
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Kind == ledger.KindRead && r.Path == "scratch/big.bin":
			read = r
		case r.Kind == ledger.KindReadHash && r.Path == "scratch/big.bin":
			hash = r
		}
	}
	require.NotNil(t, read, "the read is recorded")
	assert.Empty(t, read.SHA256, "the open did not wait for the hash")
	assert.Contains(t, read.Detail, "sha256 follows in a read_hash record; size=25165824")
	require.NotNil(t, hash, "the hash follows the read")
	assert.Equal(t, want, hash.SHA256)
	assert.Equal(t, fmt.Sprintf("read seq %d", read.Seq), hash.Detail)
	assert.Equal(t, read.PID, hash.PID)
	assert.Less(t, read.Seq, hash.Seq)

	// The ledger stays open in this process (its tail is not signed
	// yet): the verdict may be unverified, the report is complete.
	require.NoError(t, c.lw.Sync())
	out, stderr, _ := acpfs(t, "ledger", "audit", "--live", "--ledger", c.ledger, "--grants", filepath.Join(c.runs, "context_grants"), "--format", "json")
	assert.Contains(t, out, want, "the audit attaches the hash to the read: %s", stderr)

	// Remounted: the store beside the ledger knows this version.
	n := len(c.records())
	v2 := c.mountView(reviewerGrant(), withAuditOpens())
	readOnce(v2)
	require.NoError(t, v2.m.Stop())
	found := false
	for _, r := range c.records()[n:] {
		if r.Kind == ledger.KindRead && r.Path == "scratch/big.bin" {
			found = true
			assert.Equal(t, want, r.SHA256, "known at once after a remount")
		}
		assert.NotEqual(t, ledger.KindReadHash, r.Kind)
	}
	assert.True(t, found)
	_, err = os.Stat(filepath.Join(c.folder, acpfsfs.HashStoreName))
	assert.ErrorIs(t, err, os.ErrNotExist, "the store is never in the folder")
}
