package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
)

// The seal suite: the acceptance tests of a view that reaches the backing
// folder only relative to descriptors it holds, and judges every name
// where it is now. A hostile process on the backing side plants, renames
// and swaps names under a live view; the agent holds descriptors and
// mappings across grant changes; listings and directory attributes must
// not betray hidden neighbours. See acpfs-spec.md section 7.

// TestSealRenamedSymlinks: a symlink planted on the backing folder, or
// renamed there from a place where it pointed at something visible, is
// judged where it is now. Hidden, it answers ENOENT to every look, a
// create through it fails without EEXIST, and nothing changes.
func TestSealRenamedSymlinks(t *testing.T) {
	c := newCollab(t)
	outside := filepath.Join(newDir(t, "outside"), "outside.md")
	require.NoError(t, os.WriteFile(outside, []byte("outside: "+escSecret+"\n"), 0o644))
	runsIn := filepath.Join(c.folder, "runs-in") // a run directory inside the folder
	escPlant(t, c.folder, nil, map[string]string{
		"runs-in/communication_ledger.jsonl": escSecret + "\n",
		"notes.hidden":                       escSecret + " (forbidden glob)\n",
	}, nil)
	v := c.mountView(sealGrant(), sealHide(runsIn))
	oracle := filepath.Join(c.folder, "oracle")
	fromDeliv := func(abs string) string {
		rel, err := filepath.Rel(filepath.Join(c.folder, "deliverables"), abs)
		require.NoError(t, err)
		return rel
	}

	renamed := func(to, target string) func(*testing.T) {
		return func(t *testing.T) { sealPlantMoved(t, c.folder, to, target) }
	}
	planted := func(to, target string) func(*testing.T) {
		return func(t *testing.T) { escPlant(t, c.folder, map[string]string{to: target}, nil, nil) }
	}
	tests := []struct {
		name  string
		setup func(t *testing.T)
		link  string // where the link ends up
		into  string // the backing directory a directory link leads to
		guard string // a file outside the folder that must not change
		// settle: the view knew the name before it changed (see
		// sealRequireHiddenLink).
		settle bool
	}{
		{name: "the issue: ../oracle/answer.md renamed from deliverables/a/ to deliverables/",
			setup: renamed("deliverables/s1", "../oracle/answer.md"), link: "deliverables/s1"},
		{name: "two levels up, renamed into a subdirectory",
			setup: renamed("deliverables/a/s2", "../../oracle/answer.md"), link: "deliverables/a/s2"},
		{name: "three levels up, renamed into a subdirectory",
			setup: renamed("deliverables/a/b/s3", "../../../oracle/answer.md"), link: "deliverables/a/b/s3"},
		{name: "renamed from scratch/a/ into deliverables/", setup: func(t *testing.T) {
			escPlant(t, c.folder, map[string]string{"scratch/a/s4": "../oracle/answer.md"}, nil, nil)
			from, to := filepath.Join(c.folder, "scratch/a/s4"), filepath.Join(c.folder, "deliverables/s4")
			require.NoError(t, os.Rename(from, to))
		}, link: "deliverables/s4"},
		{name: "renamed so that it climbs out of the folder to a file elsewhere",
			setup: renamed("deliverables/s5", fromDeliv(outside)), link: "deliverables/s5", guard: outside},
		{name: "renamed so that it climbs out to the ledger",
			setup: renamed("deliverables/s6", fromDeliv(c.ledger)), link: "deliverables/s6"},
		{name: "renamed so that it leads into a run directory inside the folder",
			setup: renamed("deliverables/s7", "../runs-in/communication_ledger.jsonl"), link: "deliverables/s7"},
		{name: "planted to a file of a forbidden glob",
			setup: planted("deliverables/s8", "../notes.hidden"), link: "deliverables/s8"},
		{name: "planted with the oracle's absolute path",
			setup: planted("deliverables/abs", filepath.Join(oracle, "answer.md")), link: "deliverables/abs"},
		{name: "planted with the absolute path of a file outside the folder",
			setup: planted("deliverables/abs-out", outside), link: "deliverables/abs-out", guard: outside},
		{name: "directory link deliverables/d -> ../oracle, planted",
			setup: planted("deliverables/d", "../oracle"), link: "deliverables/d", into: oracle},
		{name: "directory link to ../oracle, renamed into place",
			setup: renamed("deliverables/d2", "../oracle"), link: "deliverables/d2", into: oracle},
		{name: "directory link renamed so that it climbs out to the run directory",
			setup: renamed("deliverables/runs", fromDeliv(c.runs)), link: "deliverables/runs", into: c.runs},
		{name: "RENAME_EXCHANGE of a directory the view knows with a link to ../oracle", setup: func(t *testing.T) {
			escPlant(t, c.folder, map[string]string{"deliverables/swap-link": "../oracle"},
				map[string]string{"deliverables/swap/x.md": "x\n"}, nil)
			_, err := os.Stat(v.path("deliverables/swap/x.md")) // the kernel now caches both names
			require.NoError(t, err)
			require.NoError(t, unix.Renameat2(unix.AT_FDCWD, filepath.Join(c.folder, "deliverables/swap"),
				unix.AT_FDCWD, filepath.Join(c.folder, "deliverables/swap-link"), unix.RENAME_EXCHANGE))
		}, link: "deliverables/swap", into: oracle, settle: true},
		{name: "made through the view where it is harmless, renamed through the view", setup: func(t *testing.T) {
			require.NoError(t, os.MkdirAll(v.path("deliverables/v"), 0o755))
			require.NoError(t, os.Symlink("../oracle/answer.md", v.path("deliverables/v/s9")))
			// Refusing the rename is as good as hiding the link afterwards.
			if err := os.Rename(v.path("deliverables/v/s9"), v.path("deliverables/s9")); err != nil {
				t.Logf("rename through the view refused: %v", err)
			}
		}, link: "deliverables/s9", settle: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup(t)
			oracleSHA := fileSHA(t, filepath.Join(oracle, "answer.md"))
			var guardSHA string
			if tt.guard != "" {
				guardSHA = fileSHA(t, tt.guard)
			}
			before := escTree(t, c.folder)

			sealRequireHiddenLink(t, v.dir, tt.link, tt.into, tt.settle)

			escRequireSameTree(t, before, escTree(t, c.folder))
			assert.Equal(t, oracleSHA, fileSHA(t, filepath.Join(oracle, "answer.md")), "the oracle changed")
			if tt.guard != "" {
				assert.Equal(t, guardSHA, fileSHA(t, tt.guard), "%s changed", tt.guard)
			}
		})
	}
}

// TestSealHeldDirectorySwapped: the agent holds a directory open (and an
// O_PATH descriptor of a file in it) while another process renames the
// directory away and puts a symlink to the oracle in its place. Nothing
// done through the held descriptors may reach the oracle.
func TestSealHeldDirectorySwapped(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/mine/file.md": "mine\n",
		"oracle/file.md":       escSecret + " (oracle/file.md)\n",
	}, nil)
	v := c.mountView(sealGrant())
	dirfd, err := unix.Open(v.path("scratch/mine"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(dirfd) })
	pathfd, err := unix.Open(v.path("scratch/mine/file.md"), unix.O_PATH|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(pathfd) })

	require.NoError(t, os.Rename(filepath.Join(c.folder, "scratch/mine"), filepath.Join(c.folder, "scratch/old")))
	require.NoError(t, os.Symlink("../oracle", filepath.Join(c.folder, "scratch/mine")))
	oracle := filepath.Join(c.folder, "oracle")

	// Each attempt is made at once, before the view can have noticed the
	// swap; whatever it answers, the oracle must not change. The ones
	// that only read come first, so that none judges an oracle another
	// attempt has already damaged.
	tests := []struct {
		name string
		do   func(t *testing.T) error
		// mustFail: the attempt itself must be refused; otherwise only
		// its effect on the oracle is judged.
		mustFail bool
	}{
		{name: "openat(dirfd, file.md) reads nothing of the oracle", do: func(t *testing.T) error {
			fd, err := unix.Openat(dirfd, "file.md", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			b := make([]byte, 256)
			n, err := unix.Read(fd, b)
			assert.NotContains(t, string(b[:max(n, 0)]), escSecret, "read the oracle through the held directory")
			return err
		}},
		{name: "openat(dirfd, file.md, O_WRONLY|O_TRUNC)", do: func(*testing.T) error {
			fd, err := unix.Openat(dirfd, "file.md", unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{name: "openat(dirfd, x, O_CREAT|O_WRONLY)", mustFail: true, do: func(*testing.T) error {
			fd, err := unix.Openat(dirfd, "x", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{name: "mkdirat(dirfd, y)", mustFail: true, do: func(*testing.T) error {
			return unix.Mkdirat(dirfd, "y", 0o755)
		}},
		{name: "truncate(/proc/self/fd/N, 0) of the O_PATH descriptor", do: func(*testing.T) error {
			return unix.Truncate(fmt.Sprintf("/proc/self/fd/%d", pathfd), 0)
		}},
		{name: "unlinkat(dirfd, file.md)", do: func(*testing.T) error { return unix.Unlinkat(dirfd, "file.md", 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := escTree(t, oracle)
			err := tt.do(t)
			if tt.mustFail {
				assert.Error(t, err, "the attempt succeeded")
			} else {
				t.Logf("answered %v", err)
			}
			escRequireSameTree(t, before, escTree(t, oracle))
		})
	}
}

// TestSealReaddirOffsets: the offsets a listing hands out are the view's
// own. The (name, d_off) sequence of a directory is the same whether or
// not a hidden entry lies in it on disk, and seeking to an offset resumes
// after its entry.
func TestSealReaddirOffsets(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{"listing/a.md": "a\n", "listing/c.md": "c\n"}, nil)
	v := c.mountView(sealGrant())
	dir := v.path("listing")
	want := sealReaddir(t, dir, 0)
	require.ElementsMatch(t, []string{".", "..", "a.md", "c.md"}, sealNames(want))

	backing := func(rel string) string { return filepath.Join(c.folder, "listing", rel) }
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("h%02d.hidden", i))
	}
	tests := []struct {
		name    string
		entries []string // what plant creates, removed afterwards
		plant   func(t *testing.T)
	}{
		{name: "a hard link to the oracle", entries: []string{"b.md"}, plant: func(t *testing.T) {
			require.NoError(t, os.Link(filepath.Join(c.folder, "oracle/answer.md"), backing("b.md")))
		}},
		{name: "a symlink to the oracle", entries: []string{"b-link"}, plant: func(t *testing.T) {
			require.NoError(t, os.Symlink("../oracle/answer.md", backing("b-link")))
		}},
		{name: "a symlink to the oracle's directory", entries: []string{"b-dir"}, plant: func(t *testing.T) {
			require.NoError(t, os.Symlink("../oracle", backing("b-dir")))
		}},
		{name: "a file in a forbidden glob", entries: []string{"b.hidden"}, plant: func(t *testing.T) {
			require.NoError(t, os.WriteFile(backing("b.hidden"), []byte(escSecret), 0o644))
		}},
		{name: "a directory in a forbidden glob", entries: []string{"bb.hidden"}, plant: func(t *testing.T) {
			require.NoError(t, os.Mkdir(backing("bb.hidden"), 0o755))
		}},
		{name: "forty files in a forbidden glob", entries: many, plant: func(t *testing.T) {
			for _, n := range many {
				require.NoError(t, os.WriteFile(backing(n), nil, 0o644))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.plant(t)
			t.Cleanup(func() {
				for _, n := range tt.entries {
					require.NoError(t, os.RemoveAll(backing(n)))
				}
			})
			got := sealReaddir(t, dir, 0)
			assert.Equal(t, want, got, "(name, d_off) pairs differ with a hidden neighbour")
			for i, e := range got {
				assert.Equal(t, sealNames(got[i+1:]), sealNames(sealReaddir(t, dir, e.off)),
					"listing resumed at the d_off of %q", e.name)
			}
		})
	}
}

// TestSealDirectoryAttributes: the size, blocks, link count and times of
// a directory that holds hidden entries (the folder root, which holds
// oracle/) do not move when a hidden entry comes or goes on disk. Each
// stat is taken through a freshly mounted view of the same grant, so no
// cached attribute can hide a change.
func TestSealDirectoryAttributes(t *testing.T) {
	c := newCollab(t)
	g := sealGrant()
	root := func(rel string) string { return filepath.Join(c.folder, rel) }
	tests := []struct {
		name   string
		before func(t *testing.T) // runs before the first view is mounted
		change func(t *testing.T)
	}{
		{name: "a file in a forbidden glob is created", change: func(t *testing.T) {
			require.NoError(t, os.WriteFile(root("zz.hidden"), []byte(escSecret), 0o644))
		}},
		{name: "a symlink to the oracle is created", change: func(t *testing.T) {
			require.NoError(t, os.Symlink("oracle/answer.md", root("to-oracle")))
		}},
		{name: "a hard link to the oracle is created", change: func(t *testing.T) {
			require.NoError(t, os.Link(root("oracle/answer.md"), root("alias.md")))
		}},
		{name: "a directory in a forbidden glob is created", change: func(t *testing.T) {
			require.NoError(t, os.Mkdir(root("dir.hidden"), 0o755))
		}},
		{name: "a hidden file is removed", before: func(t *testing.T) {
			require.NoError(t, os.WriteFile(root("gone.hidden"), nil, 0o644))
		}, change: func(t *testing.T) {
			require.NoError(t, os.Remove(root("gone.hidden")))
		}},
		{name: "enough hidden files are created to grow the directory", change: func(t *testing.T) {
			for i := range 200 {
				name := fmt.Sprintf("pad-%03d-%s.hidden", i, strings.Repeat("x", 60))
				require.NoError(t, os.WriteFile(root(name), nil, 0o644))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := sealSub(c, t)
			if tt.before != nil {
				tt.before(t)
			}
			first := sc.mountView(g)
			seen := sealDirStat(t, first.dir)
			require.NoError(t, first.m.Stop())

			disk := sealDirStat(t, c.folder)
			tt.change(t)
			require.NotEqual(t, disk, sealDirStat(t, c.folder), "the change must move the backing attributes")

			second := sc.mountView(g)
			assert.Equal(t, seen, sealDirStat(t, second.dir), "the root's attributes moved with a hidden entry")
			require.NoError(t, second.m.Stop())
		})
	}
}

// TestSealHiddenAliases: a visible name that is another way to a hidden
// file (a hard link, a symlink) or is hidden itself shows nothing of it,
// and creating over it answers EACCES, never EEXIST, and changes nothing.
func TestSealHiddenAliases(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, unix.Setxattr(filepath.Join(c.folder, "oracle/answer.md"), "user.secret", []byte(escSecret), 0))
	escPlant(t, c.folder,
		map[string]string{"scratch/sym": "../oracle/answer.md", "scratch/dir-sym": "../oracle"},
		map[string]string{"scratch/mine.md": "mine\n", "scratch/notes.hidden": escSecret + "\n"},
		map[string]string{"scratch/hard": "oracle/answer.md"})
	v := c.mountView(sealGrant())
	listing := escGetdents(t, v.path("scratch"))
	require.Contains(t, listing, "mine.md")

	for _, name := range []string{"scratch/hard", "scratch/sym", "scratch/dir-sym", "scratch/notes.hidden"} {
		t.Run(name, func(t *testing.T) {
			p := v.path(name)
			before := escTree(t, c.folder)
			assert.NotContains(t, listing, filepath.Base(name), "listed")

			var st unix.Stat_t
			sealErrno(t, unix.Lstat(p, &st), "lstat", unix.ENOENT)
			sealErrno(t, unix.Stat(p, &st), "stat", unix.ENOENT)
			var sx unix.Statx_t
			sealErrno(t, unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_ALL, &sx), "statx",
				unix.ENOENT)
			_, err := unix.Lgetxattr(p, "user.secret", make([]byte, 256))
			sealErrno(t, err, "lgetxattr", unix.ENOENT)
			sealErrno(t, escReadErr(p), "cat", unix.ENOENT)

			if name == "scratch/notes.hidden" {
				// A name the grant may not write: the file is made
				// private to this view (a tool's temporary file) and
				// shadows the hidden one here only.
				require.NoError(t, sealOpen(t, p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL))
				require.NoError(t, os.Remove(p))
			} else {
				sealErrno(t, sealOpen(t, p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL), "open O_CREAT|O_EXCL", unix.EACCES)
				sealErrno(t, sealOpen(t, p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC), "open O_CREAT|O_TRUNC",
					unix.ENOENT, unix.EACCES)
			}
			sealErrno(t, unix.Mkdir(p, 0o755), "mkdir", unix.EACCES)

			escRequireSameTree(t, before, escTree(t, c.folder))
		})
	}
}

// sealLateReads opens files and maps others while the grant lets the agent
// read them, applies change to the grant, rewrites every file on disk,
// and then reads through what it held. No byte written after the change
// may come back, and a read that succeeds must be in the ledger.
func sealLateReads(t *testing.T, change func(t *testing.T, c *collab, v *view, g *grants.Grant, rels []string)) {
	c := newCollab(t)
	oldBytes, newBytes := strings.Repeat("o", 63)+"\n", strings.Repeat("N", 63)+"\n"
	rels := []string{"notes/ro.md", "notes/ro-map.md", "scratch/rw.md", "scratch/rw-map.md"}
	files := map[string]string{}
	for _, r := range rels {
		files[r] = oldBytes
	}
	escPlant(t, c.folder, nil, files, nil)
	g := sealGrant()
	v := c.mountView(g)

	// Taken while readable: a read-only descriptor (served by FUSE
	// passthrough), a read-write one of a file the grant can write
	// (served by acpfs), and a shared mapping of each kind, not yet
	// touched, in another process.
	pread := func(fd int) func() ([]byte, error) {
		return func() ([]byte, error) {
			b := make([]byte, 128)
			n, err := unix.Pread(fd, b, 0)
			return b[:max(n, 0)], err
		}
	}
	ro, err := unix.Open(v.path("notes/ro.md"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(ro) })
	rw, err := unix.Open(v.path("scratch/rw.md"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(rw) })
	roMap, rwMap := sealMap(t, v.path("notes/ro-map.md"), "r"), sealMap(t, v.path("scratch/rw-map.md"), "rw")
	roMap.ready(t)
	rwMap.ready(t)
	reads := []struct {
		name, rel string
		read      func() ([]byte, error)
	}{
		{"read(2) on a read-only descriptor", "notes/ro.md", pread(ro)},
		{"read(2) on a read-write descriptor", "scratch/rw.md", pread(rw)},
		{"a shared mapping of a read-only descriptor", "notes/ro-map.md", roMap.read},
		{"a shared mapping of a read-write descriptor", "scratch/rw-map.md", rwMap.read},
	}

	change(t, c, v, g, rels)
	for _, r := range rels {
		require.NoError(t, os.WriteFile(filepath.Join(c.folder, r), []byte(newBytes), 0o644))
	}
	nrec := len(c.records())

	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			got, err := r.read()
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			assert.NotContains(t, string(got), "N", "read bytes written after the grant changed: %q", got)
			if len(got) > 0 {
				assert.True(t, sealHasRead(c.records()[nrec:], r.rel), "a read after the change is not in the ledger")
			}
		})
	}
}

// TestSealNarrowedGrantReachesOpenFiles: a grant narrowed so that files
// are no longer readable stops the descriptors and mappings already open
// on them.
func TestSealNarrowedGrantReachesOpenFiles(t *testing.T) {
	sealLateReads(t, func(t *testing.T, c *collab, v *view, g *grants.Grant, rels []string) {
		g.ForbiddenRead = append(g.ForbiddenRead, rels...)
		c.writeGrant(g)
		v.m.ReloadGrant() // the grant watcher does the same; here it is synchronous
	})
}

// TestSealRevokedGrantReachesOpenFiles: so does a revocation.
func TestSealRevokedGrantReachesOpenFiles(t *testing.T) {
	sealLateReads(t, func(t *testing.T, c *collab, v *view, g *grants.Grant, _ []string) {
		_, stderr, code := acpfs(t, "grant", "revoke", "--runs", c.runs, "--grant", g.GrantID, "--reason", "seal test")
		require.Equal(t, 0, code, stderr)
		v.m.ReloadGrant()
	})
}

// TestSealCoordinatorRenamedSymlink: the attack of the issue on a view
// mounted by `acpfs up`.
func TestSealCoordinatorRenamedSymlink(t *testing.T) {
	e := newCoordEnv(t)
	e.grant("--agent", owner, "--id", "G-alice", "--preset", "owner", "--forbid", "oracle/**")
	e.up(owner)
	sealPlantMoved(t, e.folder, "deliverables/s1", "../oracle/answer.md")
	oracleSHA := fileSHA(t, filepath.Join(e.folder, "oracle/answer.md"))
	before := escTree(t, e.folder)

	sealRequireHiddenLink(t, e.view(owner, ""), "deliverables/s1", "", false)

	escRequireSameTree(t, before, escTree(t, e.folder))
	assert.Equal(t, oracleSHA, fileSHA(t, filepath.Join(e.folder, "oracle/answer.md")))
}

// TestSealRunRenamedSymlink: the attack of the issue inside `acpfs run`,
// with the shell's own tools: a link renamed so that it leads to the
// oracle, one renamed so that it climbs out of the folder to a file
// elsewhere, and a directory link to the oracle. (Inside run the view is
// bound over the folder's path, so the daemon's own resolution of a
// `..` back into the folder lands in the view; a link that climbs out of
// the folder does not pass through it.)
func TestSealRunRenamedSymlink(t *testing.T) {
	c := newCollab(t)
	g := sealGrant()
	c.writeGrant(g)
	outside := filepath.Join(newDir(t, "outside"), "outside.md")
	require.NoError(t, os.WriteFile(outside, []byte("outside: "+escSecret+"\n"), 0o644))
	toOutside, err := filepath.Rel(filepath.Join(c.folder, "deliverables"), outside)
	require.NoError(t, err)
	sealPlantMoved(t, c.folder, "deliverables/s1", "../oracle/answer.md")
	sealPlantMoved(t, c.folder, "deliverables/s5", toOutside)
	sealPlantMoved(t, c.folder, "deliverables/d", "../oracle")
	before, outsideSHA := escTree(t, c.folder), fileSHA(t, outside)

	// `exec 3<>` opens O_RDWR|O_CREAT. Each attempt runs in a subshell
	// and prints DONE:<label>: if it succeeds, REFUSED:<label>: if not.
	attempts := []struct{ label, cmd string }{
		{"open", "exec 3<>deliverables/s1 && cat <&3"},
		{"open-outside", "exec 3<>deliverables/s5 && cat <&3"},
		{"mkdir", "mkdir deliverables/d/y"},
		{"create", ": > deliverables/d/new.md"},
		{"read", "cat deliverables/d/answer.md"},
	}
	script := `cd "$0" || exit 99` + "\n"
	for _, a := range attempts {
		script += fmt.Sprintf("( %s ) && echo DONE:%s: || echo REFUSED:%s:\n", a.cmd, a.label, a.label)
	}
	out, stderr, code := acpfs(t, "run", "--folder", c.folder, "--runs", c.runs, "--grant", g.GrantID, "--",
		"bash", "-c", script, c.folder)
	require.Equal(t, 0, code, "%s%s", out, stderr)
	all := out + stderr
	for _, a := range attempts {
		assert.Contains(t, all, "REFUSED:"+a.label+":", all)
		assert.NotContains(t, all, "DONE:"+a.label+":")
	}
	for _, w := range []string{escSecret, "File exists", "Is a directory"} {
		assert.NotContains(t, all, w)
	}
	escRequireSameTree(t, before, escTree(t, c.folder))
	assert.Equal(t, outsideSHA, fileSHA(t, outside), "the file outside the folder changed")
}
