package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

func TestQuotaStopsWritesWithEDQUOT(t *testing.T) {
	c := newCollab(t)
	g := ownerGrant()
	g.MaxWriteBytes = 64 << 10
	g.MaxFiles = 5
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "scratch"), 0o755))
	alice := c.mountView(g)
	bob := c.mountView(reviewerGrant())

	out, err := exec.Command("dd", "if=/dev/zero", "of="+alice.path("scratch/big.bin"), "bs=4096", "count=100").CombinedOutput()
	require.Error(t, err, "dd must stop at the quota: %s", out)
	assert.Contains(t, string(out), "Disk quota exceeded")
	st, err := os.Stat(filepath.Join(c.folder, "scratch/big.bin"))
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Size(), int64(64<<10), "nothing past the quota reached the folder")

	// Another agent is not held back.
	require.NoError(t, os.WriteFile(bob.path("review.md"), []byte("# Review\n\nfine\n"), 0o644))

	status := readFile(t, alice.path(".acpfs/status"))
	assert.Contains(t, status, "quota: 65536 of 65536 bytes written")
	assert.Contains(t, readFile(t, alice.path(".acpfs/last-error")), "write quota")

	// New names count too: big.bin was the first.
	for i := 1; i <= 4; i++ {
		require.NoError(t, os.WriteFile(alice.path("scratch/f"+string(rune('0'+i))), nil, 0o644))
	}
	err = os.WriteFile(alice.path("scratch/one-too-many"), nil, 0o644)
	require.ErrorIs(t, err, syscall.EDQUOT)

	var refused []ledger.Record
	for _, r := range c.records() {
		if r.Kind == ledger.KindDenied && strings.Contains(r.Detail, "quota") {
			refused = append(refused, r)
		}
	}
	require.NotEmpty(t, refused, "the refusal is in the ledger")
}

// TestRefusedLookupsStaySmall probes one hidden name 100,000 times: the
// ledger keeps one full record and counts.
func TestRefusedLookupsStaySmall(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	require.NoError(t, c.lw.Sync())
	before := fileSizeOf(t, c.ledger)
	hidden := v.path("oracle/answer.md")
	for i := 0; i < 100000; i++ {
		_, err := os.Lstat(hidden)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	require.NoError(t, v.m.Stop()) // flushes the counts
	grew := fileSizeOf(t, c.ledger) - before
	assert.LessOrEqual(t, grew, int64(1<<20), "100,000 refused lookups grew the ledger by %d bytes", grew)

	var full, counted int64
	for _, r := range c.records() {
		if r.Path != "oracle" && r.Path != "oracle/answer.md" {
			continue
		}
		switch r.Kind {
		case ledger.KindDenied:
			full++
		case ledger.KindDeniedRepeat:
			counted += r.Count
		}
	}
	assert.GreaterOrEqual(t, full, int64(1), "the first refusal is recorded in full")
	t.Logf("ledger grew %d bytes; %d full refusal records, %d repeats counted (the kernel may answer some lookups from its cache)", grew, full, counted)
}

func fileSizeOf(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	require.NoError(t, err)
	return st.Size()
}

// TestManyOpenFilesLeaveOtherViewsServed holds 10,000 files open in one
// view (up to its cap) while a second view of the same daemon keeps
// answering.
func TestManyOpenFilesLeaveOtherViewsServed(t *testing.T) {
	c := newCollab(t)
	alice := c.mountView(ownerGrant())
	bob := c.mountView(reviewerGrant())
	var held []*os.File
	t.Cleanup(func() {
		for _, f := range held {
			f.Close()
		}
	})
	var refused error
	for i := 0; i < 10000; i++ {
		f, err := os.Open(alice.path("README.md"))
		if err != nil {
			refused = err
			break
		}
		held = append(held, f)
	}
	require.Error(t, refused, "the view caps its open files")
	assert.ErrorIs(t, refused, syscall.EMFILE)
	t.Logf("%d files held open before the cap", len(held))
	for i := 0; i < 20; i++ {
		b, err := os.ReadFile(bob.path("README.md"))
		require.NoError(t, err, "the other view still serves")
		require.NotEmpty(t, b)
	}
	require.NoError(t, os.WriteFile(bob.path("review.md"), []byte("# Review\n"), 0o644))
}

// TestUnfinishedLinesAreBounded holds most of a line open on many
// handles of events.jsonl: the view stops taking more past its budget,
// and the other view is not affected.
func TestUnfinishedLinesAreBounded(t *testing.T) {
	c := newCollab(t)
	alice := c.mountView(ownerGrant())
	bob := c.mountView(reviewerGrant())
	chunk := []byte(strings.Repeat("x", (1<<20)-100))
	var refused error
	held := 0
	for i := 0; i < 20 && refused == nil; i++ {
		f, err := os.OpenFile(alice.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		if _, err := f.Write(chunk); err != nil {
			refused = err
			break
		}
		held++
	}
	require.Error(t, refused, "a view holds a bounded amount of unfinished lines")
	assert.ErrorIs(t, refused, syscall.ENOMEM)
	assert.Less(t, held, 20)
	b, err := os.ReadFile(bob.path("README.md"))
	require.NoError(t, err)
	require.NotEmpty(t, b)
}

// TestManyRefusedNamesStaySmall probes 6,000 distinct hidden files: past
// the view's distinct-path budget, refusals are counted per directory.
func TestManyRefusedNamesStaySmall(t *testing.T) {
	c := newCollab(t)
	for i := 0; i < 6000; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(c.folder, "n"+strconv.Itoa(i)), nil, 0o644))
	}
	v := c.mountView(reviewerGrant())
	require.NoError(t, c.lw.Sync())
	before := fileSizeOf(t, c.ledger)
	for i := 0; i < 6000; i++ {
		_, err := os.Lstat(v.path("n" + strconv.Itoa(i)))
		require.Error(t, err)
	}
	require.NoError(t, v.m.Stop())
	grew := fileSizeOf(t, c.ledger) - before
	full := 0
	for _, r := range c.records() {
		if r.Kind == ledger.KindDenied {
			full++
		}
	}
	assert.LessOrEqual(t, full, 4096+10, "at most the budget of distinct refusals in full")
	assert.LessOrEqual(t, grew, int64(4<<20), "ledger grew %d bytes", grew)
	t.Logf("%d full refusal records, ledger grew %d bytes", full, grew)
}

// TestDescriptorOfAMovedFile: a file moved on the backing folder into a
// place the grant hides is no longer readable through a descriptor opened
// by its old name.
func TestDescriptorOfAMovedFile(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "scratch", "private"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "scratch", "x.md"), []byte("public\n"), 0o644))
	v := c.mountView(reviewerGrant())
	f, err := os.Open(v.path("scratch/x.md"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.Rename(filepath.Join(c.folder, "scratch", "x.md"), filepath.Join(c.folder, "scratch", "private", "x.md")))
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "scratch", "private", "x.md"), []byte("SECRET\n"), 0o644))
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if err == nil || n > 0 {
		assert.NotContains(t, string(buf[:n]), "SECRET", "a moved file is not read through its old name")
	}
}
