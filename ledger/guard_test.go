package ledger

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writerVersions are the formats a writer writes: version 2 (in a file
// it continues) and the current one.
var writerVersions = []int64{Version2, CurrentVersion}

// openTamperable opens a writer over a ledger with a few records, the
// key kept beside it as in a run directory.
func openTamperable(t *testing.T) (*Writer, string) { return openTamperableV(t, CurrentVersion) }

// openTamperableV is openTamperable for a file of a format version.
func openTamperableV(t *testing.T, version int64) (*Writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock(), version: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	for i := 0; i < 3; i++ {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/x.md"})
		require.NoError(t, err)
	}
	return w, path
}

// forge appends a record with a correctly recomputed chain, as someone
// who can write the file but does not hold the key would.
func forge(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	tail, err := readTail(f, st.Size())
	require.NoError(t, f.Close())
	require.NoError(t, err)
	r := Record{Seq: tail.seq + 1, At: "2026-03-01T13:00:00.000000000Z", Kind: KindRead, Agent: "bob", Path: "oracle/answer.md"}
	le := NewLineEncoder(tail.version)
	le.After(tail.last)
	line, err := le.Encode(&r)
	require.NoError(t, err)
	appendRaw(t, path, string(line))
}

func TestWriterStopsOnTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, path string)
		reason string
	}{
		{"deleted", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }, "deleted"},
		{"replaced by a new file", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.WriteFile(path, nil, 0o600))
		}, "replaced by another file"},
		{"replaced by a symlink", func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "other.jsonl")
			require.NoError(t, os.WriteFile(other, nil, 0o600))
			require.NoError(t, os.Rename(path, path+".old"))
			require.NoError(t, os.Symlink(other, path))
		}, "symbolic link"},
		{"truncated at a record boundary", func(t *testing.T, path string) {
			b := fileBytes(t, path)
			lines := strings.SplitAfter(string(b), "\n")
			require.NoError(t, os.Truncate(path, int64(len(lines[0]))))
		}, "truncated"},
		{"last record rewritten", func(t *testing.T, path string) {
			b := fileBytes(t, path)
			i := strings.LastIndex(string(b), "docs/x.md")
			b[i] = 'D'
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}, "rewritten"},
		{"forged record with a recomputed chain", forge, "not sealed with this ledger's key"},
	}
	for _, version := range writerVersions {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				w, path := openTamperableV(t, version)
				tt.tamper(t, path)
				_, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/y.md"})
				require.ErrorIs(t, err, ErrBroken)
				assert.ErrorContains(t, err, tt.reason)
				require.NotNil(t, w.Broken())
				assert.Equal(t, int64(3), w.Broken().Seq)

				// Every later append fails too: no silent second chain.
				_, err = w.Append(Record{Kind: KindWrite, Agent: "a", Path: "docs/z.md"})
				require.ErrorIs(t, err, ErrBroken)

				var note Broken
				require.NoError(t, json.Unmarshal(fileBytes(t, path+BrokenFile), &note))
				assert.Contains(t, note.Reason, tt.reason)
				if note.Preserved != "" {
					// It ends where the writer stopped: sealed, not yet signed.
					rep, err := VerifyWith(note.Preserved, VerifyOptions{AllowUnsignedTail: true})
					require.NoError(t, err)
					assert.True(t, rep.OK(), "the preserved copy is the writer's chain")
					assert.Equal(t, int64(3), rep.LastSeq)
				}
			})
		}
	}
}

func TestWriterKeepsADeletedLedger(t *testing.T) {
	w, path := openTamperable(t)
	require.NoError(t, os.Remove(path))
	_, err := w.Append(Record{Kind: KindRead, Agent: "a"})
	require.ErrorIs(t, err, ErrBroken)
	kept := w.Broken().Preserved
	require.NotEmpty(t, kept)

	// The operator puts the file back: the writer carries on from where
	// it stopped and says that it did.
	require.NoError(t, os.Rename(kept, path))
	r, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "after"})
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Seq, "seq 4 is the ledger_recovered record")
	assert.Nil(t, w.Broken())
	assert.NoFileExists(t, path+BrokenFile)
	require.NoError(t, w.Close())
	var kinds []Kind
	require.NoError(t, Scan(path, Filter{}, func(r Record) error { kinds = append(kinds, r.Kind); return nil }))
	assert.Equal(t, []Kind{KindRead, KindRead, KindRead, KindLedgerRecovered, KindRead, KindSignedCheckpoint}, kinds)
	assertValid(t, path, 5)
}

func TestOpenRefusesAForgedTail(t *testing.T) {
	w, path := openTamperable(t)
	require.NoError(t, w.Close())
	forge(t, path)
	_, err := Open(path, Options{Sync: SyncOff})
	require.ErrorIs(t, err, ErrBroken)
	assert.ErrorContains(t, err, "seq 5")
}

func TestOpenSeesTruncationThroughTheHead(t *testing.T) {
	w, path := openTamperable(t)
	require.NoError(t, w.Close()) // seq 4 is the closing checkpoint, copied to the head
	b := fileBytes(t, path)
	lines := strings.SplitAfter(string(b), "\n")
	// Cut back to seq 3, whose record is sealed: only the head can tell.
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines[:3], "")), 0o600))
	_, err := Open(path, Options{Sync: SyncOff})
	require.ErrorIs(t, err, ErrBroken)
	assert.ErrorContains(t, err, "records were removed from the end")
}

func TestWritersShareALedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	a, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	b, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		w := a
		if i%3 == 0 {
			w = b
		}
		_, err := w.Append(Record{Kind: KindRead, Agent: "a"})
		require.NoError(t, err, "record %d", i)
	}
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	assertValid(t, path, 50)
}

func TestRepairBringsABrokenWriterBack(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, path string)
		action string
		kinds  []Kind // after the writer's three reads
	}{
		{"deleted", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) },
			RepairRestored, []Kind{KindLedgerRecovered, KindList, KindSignedCheckpoint}},
		{"replaced by a symlink", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Symlink("/etc/hostname", path))
		}, RepairRestored, []Kind{KindLedgerRecovered, KindList, KindSignedCheckpoint}},
		{"forged", forge, RepairCutForeign, []Kind{KindRepair, KindLedgerRecovered, KindList, KindSignedCheckpoint}},
		{"truncated", func(t *testing.T, path string) {
			lines := strings.SplitAfter(string(fileBytes(t, path)), "\n")
			require.NoError(t, os.WriteFile(path, []byte(lines[0]), 0o600))
		}, RepairGap, nil},
	}
	for _, version := range writerVersions {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				w, path := openTamperableV(t, version)
				tt.tamper(t, path)
				_, err := w.Append(Record{Kind: KindRead, Agent: "a"})
				require.ErrorIs(t, err, ErrBroken)

				info, err := Repair(path)
				require.NoError(t, err)
				require.NotNil(t, info)
				assert.Equal(t, tt.action, info.Action, info.Summary())

				_, err = w.Append(Record{Kind: KindList, Agent: "a"})
				require.NoError(t, err, "the writer resumes once the ledger is repaired")
				require.NoError(t, w.Close())
				var kinds []Kind
				require.NoError(t, Scan(path, Filter{}, func(r Record) error { kinds = append(kinds, r.Kind); return nil }))
				if tt.kinds != nil {
					assert.Equal(t, append([]Kind{KindRead, KindRead, KindRead}, tt.kinds...), kinds)
				} else {
					assert.Equal(t, []Kind{KindRead, KindGap, KindLedgerRecovered, KindList, KindSignedCheckpoint}, kinds)
				}
				rep, err := Verify(path)
				require.NoError(t, err)
				assert.True(t, rep.OK(), "%+v", rep.Problem)
				_, err = Open(path, Options{Sync: SyncOff})
				require.NoError(t, err, "a new writer accepts the repaired ledger")
			})
		}
	}
}

func TestRepairRefusesAnEditedRecord(t *testing.T) {
	w, path := openTamperable(t)
	b := fileBytes(t, path)
	i := strings.LastIndex(string(b), "docs/x.md")
	b[i] = 'D'
	require.NoError(t, os.WriteFile(path, b, 0o600))
	_, err := w.Append(Record{Kind: KindRead, Agent: "a"})
	require.ErrorIs(t, err, ErrBroken)
	_, err = Repair(path)
	require.Error(t, err)
}

func TestRepairSignsAKilledWritersTail(t *testing.T) {
	w, path := openTamperable(t)
	w.mu.Lock()
	w.closed = true // as if killed: no closing checkpoint
	w.mu.Unlock()
	require.NoError(t, w.f.Close())

	info, err := Repair(path)
	require.NoError(t, err)
	require.NotNil(t, info)
	assert.Equal(t, RepairSigned, info.Action)
	assert.Equal(t, int64(4), info.Record.Seq)
	assert.Equal(t, KindSignedCheckpoint, info.Record.Kind)
	info, err = Repair(path)
	require.NoError(t, err)
	assert.Nil(t, info, "nothing left to repair")
}

func TestOpenRefusesADirectoryOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	_, err := Open(filepath.Join(dir, "ledger.jsonl"), Options{Sync: SyncOff})
	require.ErrorContains(t, err, "writable by no one else")
	_, err = Repair(filepath.Join(dir, "ledger.jsonl"))
	require.ErrorContains(t, err, "writable by no one else")

	require.NoError(t, os.Chmod(dir, 0o755))
	p := filepath.Join(dir, "ledger.jsonl")
	require.NoError(t, os.WriteFile(p, nil, 0o666))
	require.NoError(t, os.Chmod(p, 0o666))
	w, err := Open(p, Options{Sync: SyncOff})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the ledger is made private")
}

// A whole sealed record whose newline was lost, or replaced by a stray
// byte, is no torn write: the repair gives it its line end back instead
// of cutting it.
func TestRepairRestoresALostLineEnd(t *testing.T) {
	for _, version := range writerVersions {
		for _, tail := range []string{"", "X"} {
			t.Run(fmt.Sprintf("v%d/stray %s", version, tail), func(t *testing.T) {
				w, path := openTamperableV(t, version)
				require.NoError(t, w.Close())
				b := fileBytes(t, path)
				b = append(b[:len(b)-1], tail...) // the checkpoint loses its "\n"
				require.NoError(t, os.WriteFile(path, b, 0o600))
				info, err := Repair(path)
				require.NoError(t, err)
				require.NotNil(t, info)
				assert.Equal(t, RepairRestoredNewline, info.Action, info.Summary())
				var kinds []Kind
				require.NoError(t, Scan(path, Filter{}, func(r Record) error { kinds = append(kinds, r.Kind); return nil }))
				assert.Equal(t, []Kind{KindRead, KindRead, KindRead, KindSignedCheckpoint, KindRepair}, kinds, "no record was cut")
				rep, err := Verify(path)
				require.NoError(t, err)
				assert.True(t, rep.OK(), "%+v", rep.Problem)
			})
		}
	}
}

// A ledger that goes quiet is signed within SignAfter.
func TestQuietLedgerIsSigned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, SignAfter: time.Millisecond})
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Append(Record{Kind: KindRead, Agent: "a"})
	require.NoError(t, err)
	// The signer runs on its own: wait for its effect. The deadline only
	// ends a test whose signer never fires.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rep, err := Verify(path); err == nil && rep.OK() && rep.SignedThrough == 2 {
			return
		}
		require.True(t, time.Now().Before(deadline), "no signed checkpoint after the ledger went quiet")
		time.Sleep(10 * time.Millisecond)
	}
}
