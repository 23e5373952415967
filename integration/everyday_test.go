package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	fs "github.com/acpfs/acpfs/view"
)

// stagedFiles lists the files under the folder's staging directory.
func stagedFiles(t *testing.T, folder string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(folder, fs.StagingDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestAtomicSavesWithRealTools: tools that save through a temporary file
// next to the target work on a file the grant lets the agent write, and
// nobody else ever sees the temporary file.
func TestAtomicSavesWithRealTools(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	other := c.mountView(reviewerGrant())
	tools := []struct {
		name, script, want string
		needs              string
	}{
		{"sed -i", `sed -i 's/^/sed: /' proposal.md`, "sed: ", "sed"},
		{"perl -pi", `perl -pi -e 's/^/perl: /' proposal.md`, "perl: ", "perl"},
		{"python mkstemp + os.replace", `python3 -c '
import os, tempfile
fd, tmp = tempfile.mkstemp(dir=".", prefix=".proposal.")
os.write(fd, b"python: replaced\n"); os.close(fd)
os.replace(tmp, "proposal.md")'`, "python: replaced", "python3"},
		{"vim", `vim -Es -u NONE -i NONE -c '%s/^/vim: /' -c 'wq' proposal.md`, "vim: ", "vim"},
	}
	for _, tc := range tools {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.needs); err != nil {
				t.Skipf("%s is not installed", tc.needs)
			}
			nrec := len(c.records())
			out, code := v.sh(tc.script)
			require.Equal(t, 0, code, out)
			got := readFile(t, filepath.Join(c.folder, "proposal.md"))
			assert.Contains(t, got, tc.want, "the save reached the backing folder")
			assert.Equal(t, got, readFile(t, other.path("proposal.md")), "the other agent reads the saved file")
			assert.Empty(t, stagedFiles(t, c.folder), "no temporary file is left behind")
			committed := false
			for _, r := range c.records()[nrec:] {
				// A rename commits a temporary file; vim writes in place
				// when it cannot rename the original away.
				if r.Kind == ledger.KindWrite && r.Path == "proposal.md" && (r.Op == "rename" || r.Op == "open") {
					committed = true
				}
			}
			assert.True(t, committed, "the save is recorded as a write of proposal.md")
			entries, err := os.ReadDir(c.folder)
			require.NoError(t, err)
			for _, e := range entries {
				assert.False(t, strings.HasPrefix(e.Name(), "sed") || strings.HasPrefix(e.Name(), ".proposal."),
					"temporary file %s in the backing folder", e.Name())
			}
		})
	}
}

// TestPrivateTemporaryFiles: until it is renamed onto a name the agent
// may write, a temporary file exists in its own view only, and it goes
// away with the view.
func TestPrivateTemporaryFiles(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	other := c.mountView(reviewerGrant())
	require.NoError(t, os.WriteFile(v.path(".proposal.md.tmp"), []byte("draft in progress\n"), 0o600))
	assert.Equal(t, "draft in progress\n", readFile(t, v.path(".proposal.md.tmp")), "its own view reads it")
	out, _ := v.sh("ls -a")
	assert.Contains(t, out, ".proposal.md.tmp", "its own view lists it")
	_, err := os.Stat(other.path(".proposal.md.tmp"))
	assert.ErrorIs(t, err, syscall.ENOENT, "another view does not see it")
	_, err = os.Stat(filepath.Join(c.folder, ".proposal.md.tmp"))
	assert.ErrorIs(t, err, syscall.ENOENT, "it is not in the folder under its name")
	_, err = os.Stat(v.path(fs.StagingDir))
	assert.ErrorIs(t, err, syscall.ENOENT, "the staging directory is never shown")
	require.Len(t, stagedFiles(t, c.folder), 1)

	// Renamed to another temporary name, it stays private.
	require.NoError(t, os.Rename(v.path(".proposal.md.tmp"), v.path(".proposal.md.tmp2")))
	assert.Equal(t, "draft in progress\n", readFile(t, v.path(".proposal.md.tmp2")))
	// Onto a name the grant does not let it write: refused.
	assert.ErrorIs(t, os.Rename(v.path(".proposal.md.tmp2"), v.path("review.md")), syscall.EACCES)

	// A file of the folder is never moved onto a private name (it would
	// leave the folder), nor exchanged with one.
	require.NoError(t, os.MkdirAll(v.path("scratch"), 0o755))
	require.NoError(t, os.WriteFile(v.path("scratch/notes.md"), []byte("notes\n"), 0o644))
	assert.ErrorIs(t, os.Rename(v.path("scratch/notes.md"), v.path(".proposal.md.tmp2")), syscall.EACCES)
	assert.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, v.path(".proposal.md.tmp2"), unix.AT_FDCWD, v.path("scratch/notes.md"),
		unix.RENAME_EXCHANGE), syscall.EACCES)
	assert.Equal(t, "notes\n", readFile(t, filepath.Join(c.folder, "scratch/notes.md")))
	assert.Equal(t, "draft in progress\n", readFile(t, v.path(".proposal.md.tmp2")))

	// Reading its own private file back is no read of the folder, even
	// under a name the grant hides.
	require.NoError(t, os.WriteFile(v.path("oracle.tmp"), []byte("mine"), 0o600))
	assert.Equal(t, "mine", readFile(t, v.path("oracle.tmp")))
	for _, r := range c.records() {
		assert.False(t, r.Kind == ledger.KindRead && r.Path == "oracle.tmp", "a read record for a private file")
	}

	// A symlink to the staging directory leads nowhere and is not shown.
	assert.ErrorIs(t, os.Symlink("../"+fs.StagingDir, v.path("scratch/stg")), syscall.EACCES)
	require.NoError(t, os.Symlink("../"+fs.StagingDir, filepath.Join(c.folder, "scratch/stg")))
	_, err = os.Lstat(other.path("scratch/stg"))
	assert.ErrorIs(t, err, syscall.ENOENT)

	require.NoError(t, v.m.Stop())
	assert.Empty(t, stagedFiles(t, c.folder), "leftovers go when the view stops")

	// What a daemon that died left (a pid that no longer runs) goes when
	// the next view of the folder starts.
	orphan := filepath.Join(c.folder, fs.StagingDir, "2147483646-dead", "t1")
	require.NoError(t, os.MkdirAll(filepath.Dir(orphan), 0o700))
	require.NoError(t, os.WriteFile(orphan, []byte("left over"), 0o600))
	third := reviewerGrant()
	third.GrantID, third.AgentID = "G-third", "third"
	c.mountView(third)
	assert.NoFileExists(t, orphan)
}

// TestProtocolFilesBehaveLikeFiles covers what a shell user expects of
// the protocol files and the control directory.
func TestProtocolFilesBehaveLikeFiles(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())

	t.Run("an event without a final newline is appended at close", func(t *testing.T) {
		before := c.snapshot().LastSeq
		line := c.event(owner, "blocked", nil)
		out, code := v.sh("printf '%s' '" + line + "' >> events.jsonl")
		require.Equal(t, 0, code, out)
		assert.Equal(t, before+1, c.snapshot().LastSeq)
		assert.True(t, strings.HasSuffix(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n"))
	})
	t.Run("a partial event at close is refused", func(t *testing.T) {
		before := readFile(t, filepath.Join(c.folder, "events.jsonl"))
		f, err := os.OpenFile(v.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.Write([]byte(`{"seq": 99, "from"`))
		require.NoError(t, err)
		assert.ErrorIs(t, f.Close(), syscall.EINVAL)
		assert.Equal(t, before, readFile(t, filepath.Join(c.folder, "events.jsonl")))
	})
	t.Run("readers never see a line still being written", func(t *testing.T) {
		p := filepath.Join(c.folder, "events.jsonl")
		whole := readFile(t, p)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.Write([]byte(`{"seq": 100, "from": "al`))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close(); os.WriteFile(p, []byte(whole), 0o644) })
		assert.Equal(t, whole, readFile(t, v.path("events.jsonl")))
	})
	t.Run("required documents can be edited but not removed or moved away", func(t *testing.T) {
		assert.ErrorIs(t, os.Rename(v.path("proposal.md"), v.path("deliverables/proposal.md")), syscall.EPERM)
		assert.ErrorIs(t, os.Remove(v.path("proposal.md")), syscall.EPERM)
		require.NoError(t, os.WriteFile(v.path("proposal.md"), []byte("# Proposal\n\nedited\n"), 0o644))
		assert.Contains(t, escLastError(t, v), "not removed or renamed away")
	})
	t.Run("the control directory can be globbed and grepped without blocking", func(t *testing.T) {
		out, code := v.sh("ls .acpfs")
		require.Equal(t, 0, code, out)
		assert.NotContains(t, out, "wait")
		out, code = v.sh("cat .acpfs/* >/dev/null && grep -r phase .acpfs")
		require.Equal(t, 0, code, out)
		assert.Contains(t, out, "phase:")
		assert.True(t, strings.HasSuffix(readFile(t, v.path(".acpfs/status")), "\n"))
	})
}
