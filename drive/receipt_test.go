package drive

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

func TestEventsFrom(t *testing.T) {
	dir := t.TempDir()
	lines := `{"seq":1,"from":"alice","event":"initialized","at":"2026-01-01T00:00:00Z","summary":"x"}
{"seq":2,"from":"alice","event":"deliverable_drafted","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":1}
{"seq":3,"from":"bob","event":"blocked","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":2}
{"seq":4,"from":"alice","event":"proposal_submitted","at":"2026-01-01T00:00:00Z","summary":"x","reply_to":3}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte(lines), 0o644))
	evs, err := eventsFrom(dir, "alice", 1)
	require.NoError(t, err)
	assert.Equal(t, []EventRef{{2, "deliverable_drafted"}, {4, "proposal_submitted"}}, evs)
}

// TestEventsFromHostileFolder: whoever writes the folder cannot make the
// driver follow a symlink or block on a FIFO.
func TestEventsFromHostileFolder(t *testing.T) {
	for name, plant := range map[string]func(p string) error{
		"symlink": func(p string) error { return os.Symlink("/etc/passwd", p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, plant(filepath.Join(dir, "events.jsonl")))
			_, err := eventsFrom(dir, "alice", 0)
			assert.Error(t, err)
		})
	}
}

// TestFillSortsRecords: a turn's receipt takes the reads, writes and
// refusals of its grant within the turn, and nothing else as a refusal
// (an allowed connection, a mount's records); only the refusals the
// agent's view told it are told to its next attempt.
func TestFillSortsRecords(t *testing.T) {
	at := func(s int) string { return fmt.Sprintf("2026-01-01T00:00:%02dZ", s) }
	recs := []ledger.Record{
		{Seq: 1, At: at(0), Kind: ledger.KindDenied, Op: ledger.OpLookup, Path: "before"},
		{Seq: 2, At: at(2), Kind: ledger.KindMountStarted},
		{Seq: 3, At: at(2), Kind: ledger.KindGrantApplied},
		{Seq: 4, At: at(3), Kind: ledger.KindRead, Op: ledger.OpOpen, Path: "proposal.md"},
		{Seq: 5, At: at(3), Kind: ledger.KindNetAllowed, Op: ledger.OpConnect, Detail: "api.test:443: resolved"},
		{Seq: 6, At: at(4), Kind: ledger.KindAppendAccepted, Op: ledger.OpAppend, Path: "events.jsonl"},
		{Seq: 7, At: at(4), Kind: ledger.KindDenied, Op: ledger.OpOpen, Path: "proposal.md", Detail: "not writable under the grant"},
		{Seq: 8, At: at(5), Kind: ledger.KindNetRefused, Op: ledger.OpConnect, Detail: "other.test:443: not in the allow-list"},
		{Seq: 9, At: at(5), Kind: ledger.KindDenied, Op: ledger.OpLookup, Path: "oracle", Detail: "hidden by grant"},
		{Seq: 10, At: at(9), Kind: ledger.KindDenied, Op: ledger.OpLookup, Path: "after"},
	}
	s := &ledgerScan{byGrant: map[string][]ledger.Record{"G-bob": recs}}
	rc := &Receipt{Grant: "G-bob", Start: at(1)}
	s.fill(rc, at(6))
	assert.Equal(t, []string{"proposal.md"}, rc.Reads)
	assert.Equal(t, []string{"events.jsonl"}, rc.Writes)
	var refused, told []int64
	for _, r := range rc.Refusals {
		refused = append(refused, r.Seq)
		if r.Told() {
			told = append(told, r.Seq)
		}
	}
	assert.Equal(t, []int64{7, 8, 9}, refused)
	assert.Equal(t, []int64{7, 8}, told, "a hidden name's refusal is not the agent's to know")
}

// TestLedgerScanKeepsEachRecordsGrant: a version 3 ledger writes a
// record's grant only when it changes; the scan, reading the file a few
// lines at a time as it grows, still files every record under its grant.
func TestLedgerScanKeepsEachRecordsGrant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "communication_ledger.jsonl")
	w, err := ledger.Open(path, ledger.Options{Sync: ledger.SyncOff})
	require.NoError(t, err)
	defer w.Close()
	s := newLedgerScan(path)
	want := map[string][]string{}
	for i, g := range []string{"G-bob", "G-bob", "G-bob", "G-alice", "G-alice", "G-bob"} {
		p := fmt.Sprintf("f%d.md", i)
		_, err := w.Append(ledger.Record{Kind: ledger.KindDenied, Agent: g[2:], Grant: g, Op: ledger.OpOpen, Path: p})
		require.NoError(t, err)
		want[g] = append(want[g], p)
		if i%2 == 1 {
			require.NoError(t, s.update())
		}
	}
	require.NoError(t, s.update())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"path":"f1.md"`)
	require.NotContains(t, string(raw), `"grant":"G-bob","path":"f1.md"`, "the file leaves the unchanged grant out")
	got := map[string][]string{}
	for g, recs := range s.byGrant {
		for _, r := range recs {
			got[g] = append(got[g], r.Path)
		}
	}
	assert.Equal(t, want, got)
}
