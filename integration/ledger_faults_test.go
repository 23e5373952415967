package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

// faultOps are the recorded operations an agent tries through its view
// while the ledger cannot take their records: each must fail with EIO
// and leave the folder as it was.
var faultOps = []struct {
	name string
	do   func(r *collabRun) error
}{
	{"read", func(r *collabRun) error { _, err := os.ReadFile(r.alice.path("README.md")); return err }},
	{"write", func(r *collabRun) error { return os.WriteFile(r.alice.path("proposal.md"), []byte("changed\n"), 0o644) }},
	{"create", func(r *collabRun) error { return os.WriteFile(r.alice.path("scratch.md"), []byte("new\n"), 0o644) }},
	{"rename", func(r *collabRun) error {
		return os.Rename(r.alice.path("decisions.md"), r.alice.path("decisions-old.md"))
	}},
	{"append", func(r *collabRun) error {
		if errno := r.alice.appendEvent(r.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})); errno != 0 {
			return errno
		}
		return nil
	}},
	{"refused read", func(r *collabRun) error { _, err := os.ReadFile(r.alice.path("oracle/answer.md")); return err }},
}

// requireFailsClosed runs every faultOp and checks the answer, the
// folder and what the view says about it.
func requireFailsClosed(t *testing.T, r *collabRun) {
	t.Helper()
	events := readFile(t, filepath.Join(r.c.folder, "events.jsonl"))
	proto := readFile(t, filepath.Join(r.c.folder, "protocol.json"))
	proposal := readFile(t, filepath.Join(r.c.folder, "proposal.md"))
	for _, op := range faultOps {
		err := op.do(r)
		require.ErrorIs(t, err, syscall.EIO, "%s while the ledger cannot record it", op.name)
	}
	assert.Equal(t, events, readFile(t, filepath.Join(r.c.folder, "events.jsonl")), "events.jsonl unchanged")
	assert.Equal(t, proto, readFile(t, filepath.Join(r.c.folder, "protocol.json")), "protocol.json unchanged")
	assert.Equal(t, proposal, readFile(t, filepath.Join(r.c.folder, "proposal.md")), "proposal.md unchanged")
	assert.NoFileExists(t, filepath.Join(r.c.folder, "scratch.md"))
	assert.FileExists(t, filepath.Join(r.c.folder, "decisions.md"))
	assert.Contains(t, readFile(t, r.alice.path(".acpfs/last-error")), "ledger")
}

func TestLedgerTamperedWhileMounted(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, c *collab)
		status string
	}{
		{"deleted", func(t *testing.T, c *collab) { require.NoError(t, os.Remove(c.ledger)) }, "deleted"},
		{"replaced by a symlink", func(t *testing.T, c *collab) {
			// A fresh chain elsewhere that would verify on its own.
			other := filepath.Join(t.TempDir(), "fresh.jsonl")
			w, err := ledger.Open(other, ledger.Options{})
			require.NoError(t, err)
			_, err = w.Append(ledger.Record{Kind: ledger.KindMountStarted, Agent: owner})
			require.NoError(t, err)
			require.NoError(t, w.Close())
			require.NoError(t, os.Remove(c.ledger))
			require.NoError(t, os.Symlink(other, c.ledger))
		}, "symbolic link"},
		{"truncated at a record boundary", func(t *testing.T, c *collab) {
			b := []byte(readFile(t, c.ledger))
			lines := strings.SplitAfter(string(b), "\n")
			require.Greater(t, len(lines), 3)
			require.NoError(t, os.Truncate(c.ledger, int64(len(strings.Join(lines[:2], "")))))
		}, "truncated"},
		{"forged record with a recomputed chain", func(t *testing.T, c *collab) {
			recs := c.records()
			last := recs[len(recs)-1]
			// Written as a writer of the file's format would, less the
			// batch seal its key would make.
			le := ledger.NewLineEncoder(ledger.CurrentVersion)
			le.After(last)
			line, err := le.Encode(&ledger.Record{Seq: last.Seq + 1, At: last.At, Kind: ledger.KindRead, Agent: reviewer, Grant: "G-reviewer",
				Path: "oracle/answer.md", Op: "open"})
			require.NoError(t, err)
			f, err := os.OpenFile(c.ledger, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(line)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			chain, err := ledger.VerifyStream(bytes.NewReader([]byte(readFile(t, c.ledger))))
			require.NoError(t, err)
			require.Nil(t, chain.Problem, "the hash chain alone cannot tell a forged record")
			rep, err := ledger.Verify(c.ledger)
			require.NoError(t, err)
			require.NotNil(t, rep.Problem, "the signatures can")
			assert.Equal(t, ledger.ProblemUnsignedTail, rep.Problem.Kind)
			// And the audit convicts no one on it.
			c.writeGrant(reviewerGrant())
			c.writeGrant(ownerGrant())
			out, stderr, code := acpfs(t, "audit", "--runs", c.runs, "--format", "json")
			assert.Equal(t, 2, code, "%s%s", out, stderr)
			assert.NotContains(t, out, `"verdict": "violated"`, "a forged record convicts no one")
			assert.Contains(t, out, `"verdict": "unverified"`)
		}, "not sealed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRun(t)
			_, err := os.ReadFile(r.alice.path("README.md"))
			require.NoError(t, err)
			require.NoError(t, r.c.lw.Sync())

			tt.tamper(t, r.c)
			requireFailsClosed(t, r)
			st := readFile(t, r.alice.path(".acpfs/status"))
			assert.Contains(t, st, "ledger: stopped")
			assert.Contains(t, st, tt.status)

			// The operator's way back.
			out, stderr, code := acpfs(t, "ledger", "verify", "--repair", "--ledger", r.c.ledger)
			t.Logf("verify --repair: %s%s", out, stderr)
			require.Equal(t, 0, code, "%s%s", out, stderr)
			_, err = os.ReadFile(r.alice.path("README.md"))
			require.NoError(t, err, "the view serves again once the ledger is repaired")
			assert.Contains(t, readFile(t, r.alice.path(".acpfs/status")), "ledger: recording")
			var kinds []ledger.Kind
			for _, rec := range r.c.records() {
				kinds = append(kinds, rec.Kind)
			}
			assert.Contains(t, kinds, ledger.KindLedgerRecovered)
		})
	}
}

// TestLedgerFullDisk puts the ledger on a tiny tmpfs and fills it.
func TestLedgerFullDisk(t *testing.T) {
	testutil.RequireFUSE(t)
	r := newRunWithLedger(t, func(t *testing.T) string {
		dir := t.TempDir()
		require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k,mode=0700"))
		t.Cleanup(func() { require.NoError(t, unix.Unmount(dir, 0)) })
		return filepath.Join(dir, "ledger.jsonl")
	})
	_, err := os.ReadFile(r.alice.path("README.md"))
	require.NoError(t, err)
	filler, err := os.Create(filepath.Join(filepath.Dir(r.c.ledger), "filler"))
	require.NoError(t, err)
	_, err = filler.Write(make([]byte, 512<<10))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, filler.Close())
	// The ledger's last page may still hold a few records.
	for i := 0; i < 64; i++ {
		if _, err = os.ReadFile(r.alice.path("README.md")); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syscall.EIO, "reads fail once the ledger is full")
	requireFailsClosed(t, r)
	// A hidden name and an absent one answer alike while probes cannot be
	// recorded.
	_, errHidden := os.Lstat(r.alice.path("oracle"))
	_, errAbsent := os.Lstat(r.alice.path("no-such-name"))
	assert.ErrorIs(t, errHidden, syscall.EIO)
	assert.ErrorIs(t, errAbsent, syscall.EIO)
	assert.Contains(t, readFile(t, r.bob.path(".acpfs/status")), "ledger: cannot be written")

	require.NoError(t, os.Remove(filepath.Join(filepath.Dir(r.c.ledger), "filler")))
	_, err = os.ReadFile(r.alice.path("README.md"))
	require.NoError(t, err, "the view serves again once there is room")
}

// TestLedgerImmutable makes the ledger immutable (chattr +i).
func TestLedgerImmutable(t *testing.T) {
	r := newRun(t)
	_, err := exec.LookPath("chattr")
	require.NoError(t, err, "chattr (e2fsprogs) is needed")
	out, err := exec.Command("chattr", "+i", r.c.ledger).CombinedOutput()
	require.NoError(t, err, "chattr +i: %s", out)
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", r.c.ledger).Run() })
	requireFailsClosed(t, r)
	out, err = exec.Command("chattr", "-i", r.c.ledger).CombinedOutput()
	require.NoError(t, err, "chattr -i: %s", out)
	_, err = os.ReadFile(r.alice.path("README.md"))
	require.NoError(t, err)
}

// newRunWithLedger is newRun with the ledger at the path place returns.
func newRunWithLedger(t *testing.T, place func(t *testing.T) string) *collabRun {
	c := newCollab(t)
	path := place(t)
	lw, err := ledger.Open(path, ledger.Options{Sync: ledger.SyncBatch})
	require.NoError(t, err)
	t.Cleanup(func() { lw.Close() })
	c.ledger, c.lw = path, lw
	withLedger := func(cfg *mount.Config) { cfg.Ledger = lw }
	return &collabRun{t: t, c: c, alice: c.mountView(ownerGrant(), withAuditOpens(), withLedger), bob: c.mountView(reviewerGrant(), withAuditOpens(), withLedger)}
}
