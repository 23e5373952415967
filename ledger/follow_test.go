package ledger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// followAll hands out everything a signature covers now.
func followAll(t *testing.T, fo *Follower) []Line {
	t.Helper()
	var out []Line
	for {
		lines, err := fo.Next(64 << 10)
		require.NoError(t, err)
		if len(lines) == 0 {
			return out
		}
		out = append(out, lines...)
	}
}

// ledgerBytes is the chain as the files hold it, segments first.
func ledgerBytes(t *testing.T, path string) []byte {
	t.Helper()
	names, err := Segments(path)
	require.NoError(t, err)
	var all []byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		all = append(all, b...)
	}
	return all
}

func joined(lines []Line) []byte {
	var b []byte
	for _, l := range lines {
		b = append(b, l.Data...)
	}
	return b
}

func writeRecords(t *testing.T, w *Writer, n int) {
	t.Helper()
	for i := range n {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/file.md", Detail: string(rune('a' + i%26))})
		require.NoError(t, err)
	}
}

func TestFollowerHandsOutSignedRecordsAcrossSegments(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		records int
	}{
		{"one file", Options{Sync: SyncOff, SignEvery: 50}, 274},
		{"segments", Options{Sync: SyncOff, SignEvery: 30, SegmentBytes: 8 << 10}, 274},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			w, err := Open(path, tt.opts)
			require.NoError(t, err)
			pub, err := LoadPublicKey(filepath.Join(filepath.Dir(path), PublicKeyFile))
			require.NoError(t, err)
			fo, err := NewFollower(path, []PublicKey{pub})
			require.NoError(t, err)
			defer fo.Close()

			writeRecords(t, w, tt.records/2)
			first := followAll(t, fo)
			all := ledgerBytes(t, path)
			require.NotEmpty(t, first)
			assert.True(t, bytes.HasPrefix(all, joined(first)), "handed out as stored, in order")
			last := first[len(first)-1]
			assert.NotEqual(t, len(all), len(joined(first)), "the unsigned tail waits for its signature")

			writeRecords(t, w, tt.records/2)
			require.NoError(t, w.Close())
			rest := followAll(t, fo)
			got := append(first, rest...)
			assert.Equal(t, string(ledgerBytes(t, path)), string(joined(got)))
			for i, l := range got {
				require.Equal(t, int64(i+1), l.Seq)
			}
			if tt.opts.SegmentBytes > 0 {
				names, err := Segments(path)
				require.NoError(t, err)
				require.Greater(t, len(names), 2, "the ledger rotated")
			}

			// Back to a copied position: the same records again.
			require.NoError(t, fo.After(last.Seq, last.Hash))
			assert.Equal(t, string(joined(rest)), string(joined(followAll(t, fo))))
			require.NoError(t, fo.After(0, ""))
			assert.Equal(t, string(joined(got)), string(joined(followAll(t, fo))))
			mid := got[len(got)/3]
			require.NoError(t, fo.After(mid.Seq, mid.Hash))
			assert.Equal(t, string(joined(got[len(got)/3+1:])), string(joined(followAll(t, fo))))
			seq, hash := fo.Position()
			assert.Equal(t, got[len(got)-1].Seq, seq)
			assert.Equal(t, got[len(got)-1].Hash, hash)

			// A copy the ledger does not continue.
			require.ErrorIs(t, fo.After(mid.Seq, last.Hash), ErrDiverged)
			require.ErrorIs(t, fo.After(int64(len(got)+5), last.Hash), ErrDiverged)
		})
	}
}

func TestFollowerRefusesForeignRecords(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(t *testing.T, path string, last Record)
		want    string
		before  int64 // records handed out before the problem
		version int64
	}{
		{"appended without the key", func(t *testing.T, path string, last Record) {
			r := Record{Seq: last.Seq + 1, At: last.At, Kind: KindSignedCheckpoint, Key: last.Key, Sig: last.Sig, Prev: last.Hash}
			h, err := HashRecord(r)
			require.NoError(t, err)
			r.Hash = h
			line, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			appendBytes(t, path, line)
		}, ProblemForged, 6, Version3},
		{"appended without the key", func(t *testing.T, path string, last Record) {
			r := Record{Seq: last.Seq + 1, At: last.At, Kind: KindSignedCheckpoint, Key: last.Key, Sig: last.Sig, Prev: last.Hash}
			h, err := HashRecord(r)
			require.NoError(t, err)
			r.Hash = h
			line, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			appendBytes(t, path, line)
		}, ProblemForged, 6, Version2},
		{"edited", func(t *testing.T, path string, _ Record) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, bytes.Replace(b, []byte(`"detail":"c"`), []byte(`"detail":"x"`), 1), 0o600))
		}, ProblemHash, 0, Version2},
		// Version 3: the edited line carries no hash; the checkpoint after
		// it no longer links.
		{"edited", func(t *testing.T, path string, _ Record) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, bytes.Replace(b, []byte(`"detail":"c"`), []byte(`"detail":"x"`), 1), 0o600))
		}, ProblemPrev, 0, Version3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("v%d/%s", tt.version, tt.name), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			w, err := Open(path, Options{Sync: SyncOff, SignEvery: 1000, version: tt.version})
			require.NoError(t, err)
			writeRecords(t, w, 5)
			require.NoError(t, w.Close())
			pub, err := LoadPublicKey(filepath.Join(filepath.Dir(path), PublicKeyFile))
			require.NoError(t, err)
			var last Record
			require.NoError(t, Scan(path, Filter{}, func(r Record) error { last = r; return nil }))
			tt.tamper(t, path, last)

			fo, err := NewFollower(path, []PublicKey{pub})
			require.NoError(t, err)
			defer fo.Close()
			if tt.before > 0 {
				lines, err := fo.Next(1 << 20)
				require.NoError(t, err)
				require.Len(t, lines, int(tt.before))
			}
			lines, err := fo.Next(1 << 20)
			require.ErrorContains(t, err, tt.want)
			assert.Empty(t, lines)
			seq, _ := fo.Position()
			assert.Equal(t, tt.before, seq, "nothing after the problem handed out")
			_, err = fo.Next(1 << 20)
			require.ErrorContains(t, err, tt.want, "the problem stays")
		})
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestFollowerKeepsUpWithAWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, SignEvery: 16, SegmentBytes: 8 << 10})
	require.NoError(t, err)
	pub, err := LoadPublicKey(filepath.Join(filepath.Dir(path), PublicKeyFile))
	require.NoError(t, err)
	fo, err := NewFollower(path, []PublicKey{pub})
	require.NoError(t, err)
	defer fo.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 400 {
			if _, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/file.md"}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	// Follow while the writer writes and rotates.
	var got []Line
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		lines, err := fo.Next(16 << 10)
		require.NoError(t, err)
		got = append(got, lines...)
	}
	require.NoError(t, w.Close())
	got = append(got, followAll(t, fo)...)
	assert.Equal(t, string(ledgerBytes(t, path)), string(joined(got)))
}

func TestFollowerFollowsARestoredLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	writeRecords(t, w, 10)
	require.NoError(t, w.Close())
	pub, err := LoadPublicKey(filepath.Join(filepath.Dir(path), PublicKeyFile))
	require.NoError(t, err)
	fo, err := NewFollower(path, []PublicKey{pub})
	require.NoError(t, err)
	defer fo.Close()
	first := followAll(t, fo)
	require.NotEmpty(t, first)

	// Another file with the same records now stands at the name, as when
	// an operator puts a preserved copy back; writing goes on in it.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	tmp := path + ".copy"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Rename(tmp, path))
	w, err = Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	writeRecords(t, w, 10)
	require.NoError(t, w.Close())

	rest := followAll(t, fo)
	require.NotEmpty(t, rest)
	assert.Equal(t, string(ledgerBytes(t, path)), string(joined(append(first, rest...))))
}
