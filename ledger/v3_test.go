package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// v3Hash is the hash rule of a version 3 line, written out: the SHA-256
// of the line with `,"prev":"PREV","hash":""` before its closing brace
// (an unsigned line), or with its hash emptied (a signed one).
func v3Hash(line, prev string) string {
	line = strings.TrimSuffix(line, "\n")
	if i := strings.LastIndex(line, `,"hash":"`); strings.Contains(line, `"sig":"`) && i > 0 {
		line = line[:i] + `,"hash":""}`
	} else {
		line = strings.TrimSuffix(line, "}") + `,"prev":"` + prev + `","hash":""}`
	}
	sum := sha256.Sum256([]byte(line))
	return hex.EncodeToString(sum[:])
}

func TestAppendChainV3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncAlways, Clock: fixedClock()})
	require.NoError(t, err)
	var recs []Record
	for _, r := range []Record{
		{Kind: KindMountStarted, Agent: "a", Grant: "G-a", PID: 7, Seq: 99, Prev: "forged", Hash: "forged", At: "yesterday", Key: "k", MAC: "m"},
		{Kind: KindRead, Agent: "a", Grant: "G-a", PID: 7, Path: "docs/<b>&.md", Detail: `say "x"`},
		{Kind: KindRead, Agent: "a", Grant: "G-a", PID: 8, Path: "docs/c.md"},
		{Kind: KindGrantCreated, Detail: "no agent"},
		{Kind: KindList, Agent: "b", Grant: "G-b", Op: OpReaddir},
	} {
		got, err := w.Append(r)
		require.NoError(t, err)
		recs = append(recs, got)
	}
	require.NoError(t, w.Close())

	data := fileBytes(t, path)
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 6, "five records and the closing checkpoint")
	mac := func(i int) string { return `,"mac":"` + recs[i].MAC + `"}` + "\n" }
	// Each record is its own batch here, so each carries the batch seal.
	assert.Equal(t, `{"seq":1,"version":3,"at":"2026-03-01T12:00:00.001000000Z","kind":"mount_started","agent":"a","grant":"G-a","pid":7`+mac(0), lines[0])
	assert.Equal(t, `{"seq":2,"at":"2026-03-01T12:00:00.002000000Z","kind":"read","path":"docs/<b>&.md","detail":"say \"x\""`+mac(1), lines[1],
		"agent, grant and pid as the record before: left out")
	assert.Equal(t, `{"seq":3,"at":"2026-03-01T12:00:00.003000000Z","kind":"read","path":"docs/c.md","pid":8`+mac(2), lines[2])
	assert.Equal(t, `{"seq":4,"at":"2026-03-01T12:00:00.004000000Z","kind":"grant_created","agent":"","grant":"","pid":0,"detail":"no agent"`+mac(3), lines[3],
		"a context field that becomes empty is written empty")
	assert.Equal(t, `{"seq":5,"at":"2026-03-01T12:00:00.005000000Z","kind":"list","agent":"b","grant":"G-b","op":"readdir"`+mac(4), lines[4])
	assert.Contains(t, lines[5], `"kind":"checkpoint","count":5,"key":"`)
	assert.Contains(t, lines[5], `","prev":"`+recs[4].Hash+`","hash":"`)

	prev := ""
	for i, r := range recs {
		assert.Equal(t, int64(i+1), r.Seq)
		assert.Equal(t, prev, r.Prev, "seq %d", r.Seq)
		assert.Equal(t, v3Hash(lines[i], prev), r.Hash, "seq %d: the hash rule as documented", r.Seq)
		assert.Empty(t, r.Key, "an unsigned record names no key")
		assert.Len(t, r.MAC, 22, "a 128-bit seal in base64url")
		prev = r.Hash
	}
	// Readers put back what the lines leave out.
	var read []Record
	require.NoError(t, Scan(path, Filter{}, func(r Record) error { read = append(read, r); return nil }))
	require.Len(t, read, 6)
	assert.Equal(t, recs, read[:5])
	assert.Equal(t, v3Hash(lines[5], prev), read[5].Hash)
	assertValid(t, path, 5)

	// Reopening continues the chain and the context.
	w, err = Open(path, Options{Sync: SyncBatch})
	require.NoError(t, err)
	r6, err := w.Append(Record{Kind: KindList, Agent: "b", Grant: "G-b", Op: OpReaddir})
	require.NoError(t, err)
	r7, err := w.Append(Record{Kind: KindList, Agent: "b", Grant: "G-b", Op: OpReaddir})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	lines = strings.SplitAfter(strings.TrimSuffix(string(fileBytes(t, path)), "\n"), "\n")
	assert.Contains(t, lines[6], `"kind":"list","agent":"b","grant":"G-b"`, "after a signed record, stated again")
	assert.NotContains(t, lines[7], `"agent"`)
	assert.Equal(t, v3Hash(lines[6], read[5].Hash), r6.Hash)
	assert.Equal(t, r6.Hash, r7.Prev)
	assertValid(t, path, 7)
}

// TestWriterKeepsTheFileVersion: a writer continues a version 2 file in
// version 2 (a file never mixes versions) and starts every new segment in
// version 3; the chain runs on across them.
func TestWriterKeepsTheFileVersion(t *testing.T) {
	path := writeLedgerV(t, 20, Version2)
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock(), SegmentBytes: 8 << 10})
	require.NoError(t, err)
	for i := range 80 {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Grant: "G-a", Path: fmt.Sprintf("docs/%d.md", i), PID: 42})
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	files, err := Segments(path)
	require.NoError(t, err)
	require.Greater(t, len(files), 2)
	for i, name := range files {
		lines := strings.SplitAfter(strings.TrimSuffix(string(fileBytes(t, name)), "\n"), "\n")
		want := int64(Version3)
		if i == 0 {
			want = Version2
		}
		first, err := decodeLine([]byte(strings.TrimSuffix(lines[0], "\n")))
		require.NoError(t, err)
		assert.Equal(t, want, first.Version, name)
		for _, l := range lines {
			if strings.Contains(l, `"sig":"`) {
				continue
			}
			// Every version 2 line carries its chain; no version 3
			// unsigned line does.
			assert.Equal(t, want == Version2, strings.Contains(l, `"hash":"`), "%s: %s", name, l)
		}
	}
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.Equal(t, files, rep.Files)
	n := 0
	require.NoError(t, Scan(path, Filter{Kinds: []Kind{KindRead}}, func(Record) error { n++; return nil }))
	assert.Equal(t, 100, n)
}

// reencode re-encodes line i of a version 3 file after the lines before
// it (as someone without the key can), edit applied to its record.
func reencode(t *testing.T, l [][]byte, i int, edit func(r *Record)) {
	t.Helper()
	var recs []Record
	rd := NewReader(bytes.NewReader(bytes.Join(l[:i+1], nil)))
	for range i + 1 {
		r, err := rd.Next()
		require.NoError(t, err)
		recs = append(recs, r)
	}
	le := NewLineEncoder(Version3)
	if i > 0 {
		le.After(recs[i-1])
	}
	r := recs[i]
	edit(&r)
	line, err := le.Encode(&r)
	require.NoError(t, err)
	l[i] = line
}

// TestVerifyDetectsTamperingV3 is TestVerifyDetectsTampering on a version
// 3 file, checkpoint included: the lines of unsigned records carry no
// hash, so an edit of one shows where the next line that does (the
// checkpoint) no longer links; everything else shows where it is.
func TestVerifyDetectsTamperingV3(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(t *testing.T, lines [][]byte) [][]byte // lines keep their "\n"; 10 records and a checkpoint
		seq     int64
		kind    string
		records int64
	}{
		{"edit", func(t *testing.T, l [][]byte) [][]byte {
			l[4] = bytes.Replace(l[4], []byte("docs/5.md"), []byte("docs/X.md"), 1)
			return l
		}, 11, ProblemPrev, 10},
		{"edit, re-encoded", func(t *testing.T, l [][]byte) [][]byte {
			reencode(t, l, 4, func(r *Record) { r.Agent = "b" })
			return l
		}, 11, ProblemPrev, 10},
		{"context left out where it differs", func(t *testing.T, l [][]byte) [][]byte {
			l[0] = bytes.Replace(l[0], []byte(`"agent":"a",`), nil, 1)
			return l
		}, 11, ProblemPrev, 10},
		{"checkpoint edited", func(t *testing.T, l [][]byte) [][]byte {
			require.Contains(t, string(l[10]), `"count":10`)
			l[10] = bytes.Replace(l[10], []byte(`"count":10`), []byte(`"count":12`), 1)
			return l
		}, 11, ProblemHash, 10},
		{"remove", func(t *testing.T, l [][]byte) [][]byte { return append(l[:4:4], l[5:]...) }, 5, ProblemSeq, 4},
		{"reorder", func(t *testing.T, l [][]byte) [][]byte { l[4], l[5] = l[5], l[4]; return l }, 5, ProblemSeq, 4},
		{"insert copy", func(t *testing.T, l [][]byte) [][]byte {
			return append(append(l[:4:4], l[2]), l[4:]...)
		}, 5, ProblemSeq, 4},
		{"insert forged, seq right", func(t *testing.T, l [][]byte) [][]byte {
			forged := bytes.Replace(l[4], []byte("docs/5.md"), []byte("forged.md"), 1)
			return append(append(l[:4:4], forged), l[4:]...)
		}, 6, ProblemSeq, 5},
		{"garbage line", func(t *testing.T, l [][]byte) [][]byte {
			return append(append(l[:7:7], []byte("hello\n")), l[7:]...)
		}, 8, ProblemGarbage, 7},
		{"blank line", func(t *testing.T, l [][]byte) [][]byte {
			return append(append(l[:7:7], []byte("\n")), l[7:]...)
		}, 8, ProblemGarbage, 7},
		{"unknown field", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`{"seq"`), []byte(`{"x":1,"seq"`), 1)
			return l
		}, 2, ProblemGarbage, 1},
		{"reformatted", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`,"at"`), []byte(`, "at"`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"duplicate key", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`"path":"docs/2.md"`), []byte(`"path":"x","path":"docs/2.md"`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"context repeated", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`"kind":"read"`), []byte(`"kind":"read","agent":"a"`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"empty context on a file's first record", func(t *testing.T, l [][]byte) [][]byte {
			l[0] = bytes.Replace(l[0], []byte(`"kind":"read"`), []byte(`"kind":"read","op":""`), 1)
			return l
		}, 1, ProblemNonCanonical, 0},
		{"key on an unsigned record", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`,"mac":`), []byte(`,"key":"fe812c12f3ab4ce6","mac":`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"chain on an unsigned record", func(t *testing.T, l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte("}\n"), []byte(`,"prev":"","hash":"`+strings.Repeat("0", 64)+`"}`+"\n"), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"version on a later record", func(t *testing.T, l [][]byte) [][]byte {
			reencode(t, l, 1, func(r *Record) { r.Version = Version3 })
			return l
		}, 2, ProblemNonCanonical, 1},
		{"torn tail", func(t *testing.T, l [][]byte) [][]byte {
			return append(l, []byte(`{"seq":12,"at":"2026`))
		}, 12, ProblemTorn, 11},
		{"torn record without newline", func(t *testing.T, l [][]byte) [][]byte {
			l[10] = bytes.TrimSuffix(l[10], []byte("\n"))
			return l
		}, 11, ProblemTorn, 10},
		{"first record removed", func(t *testing.T, l [][]byte) [][]byte { return l[1:] }, 1, ProblemSeq, 0},
		// The head file keeps the closing checkpoint.
		{"last record removed", func(t *testing.T, l [][]byte) [][]byte { return l[:10] }, 11, ProblemTruncated, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLedgerV(t, 10, Version3)
			lines := splitLines(fileBytes(t, path))
			lines = lines[:len(lines)-1] // SplitAfter leaves an empty last element
			require.Len(t, lines, 11, "10 records and the closing checkpoint")
			require.NoError(t, os.WriteFile(path, bytes.Join(tt.tamper(t, lines), nil), 0o600))
			for _, slow := range []bool{false, true} {
				rep, err := verifyWith(path, VerifyOptions{}, slow)
				require.NoError(t, err)
				assert.False(t, rep.SignaturesChecked, "the chain alone: no public key here")
				assert.Equal(t, tt.records, rep.Records)
				require.NotNil(t, rep.Problem)
				assert.Equal(t, tt.seq, rep.Problem.Seq, rep.Problem.Error())
				assert.Equal(t, tt.kind, rep.Problem.Kind, rep.Problem.Error())
				assert.NotEmpty(t, rep.Problem.Reason)
			}
		})
	}
}

// killedWriter writes n records, each its own sealed batch, and stops as
// a killed writer does: no closing checkpoint. The tail after the last
// signature is sealed, not signed.
func killedWriter(t *testing.T, n int) string {
	t.Helper()
	w, path := openTamperableV(t, Version3)
	for i := range n {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Grant: "G-a", Path: fmt.Sprintf("docs/%d.md", i)})
		require.NoError(t, err)
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	require.NoError(t, w.f.Close())
	return path
}

// TestV3UnsignedTail: a version 3 tail that no signature covers yet
// (lines without their hash) is linked from the last signed record, or
// from the file's start, by the next writer and by the repair.
func TestV3UnsignedTail(t *testing.T) {
	t.Run("a new writer continues it", func(t *testing.T) {
		path := killedWriter(t, 40)
		w, err := Open(path, Options{Sync: SyncOff})
		require.NoError(t, err)
		r, err := w.Append(Record{Kind: KindList, Agent: "a", Grant: "G-a"})
		require.NoError(t, err)
		assert.Equal(t, int64(44), r.Seq, "three reads, forty more")
		require.NoError(t, w.Close())
		assertValid(t, path, 44)
		lines := strings.Split(string(fileBytes(t, path)), "\n")
		assert.NotContains(t, lines[43], `"agent"`, "the context carried over from the killed writer's last record")
	})
	t.Run("the repair signs it", func(t *testing.T) {
		path := killedWriter(t, 40)
		info, err := Repair(path)
		require.NoError(t, err)
		require.NotNil(t, info)
		assert.Equal(t, RepairSigned, info.Action, info.Summary())
		assertValid(t, path, 43)
	})
	t.Run("a sealed record that lost its newline", func(t *testing.T) {
		path := killedWriter(t, 5)
		b := fileBytes(t, path)
		require.NoError(t, os.WriteFile(path, b[:len(b)-1], 0o600))
		info, err := Repair(path)
		require.NoError(t, err)
		require.NotNil(t, info)
		assert.Equal(t, RepairRestoredNewline, info.Action, info.Summary())
		rep, err := VerifyWith(path, VerifyOptions{AllowUnsignedTail: true})
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Problem)
		assert.Equal(t, int64(9), rep.LastSeq, "no record cut: eight and the repair")
	})
	t.Run("a sealed line copied to the end", func(t *testing.T) {
		// Its seal binds it to the record before it: elsewhere it is no
		// writer's.
		path := killedWriter(t, 5)
		lines := strings.SplitAfter(string(fileBytes(t, path)), "\n")
		appendRaw(t, path, lines[4])
		_, err := Open(path, Options{Sync: SyncOff})
		require.ErrorIs(t, err, ErrBroken)
	})
	t.Run("a fake seal", func(t *testing.T) {
		path := killedWriter(t, 5)
		appendRaw(t, path, `{"seq":9,"at":"2026-03-01T12:00:00.009000000Z","kind":"read","path":"oracle/x.md","mac":"AAAAAAAAAAAAAAAAAAAAAA"}`+"\n")
		copied := filepath.Join(t.TempDir(), "ledger.jsonl")
		require.NoError(t, os.WriteFile(copied, fileBytes(t, path), 0o600))
		require.NoError(t, writeKeyFile(filepath.Dir(copied), mustLoadKey(t, filepath.Dir(path))))
		_, err := Open(copied, Options{Sync: SyncOff})
		require.ErrorIs(t, err, ErrBroken)
		info, err := Repair(path)
		require.NoError(t, err)
		assert.Equal(t, RepairCutForeign, info.Action, info.Summary())
		assertValid(t, path, 9) // eight reads and the repair
	})
	t.Run("an edit in it", func(t *testing.T) {
		// Without the record's own hash, an edit and an imitation look
		// alike: the repair moves the records from the edit on aside,
		// byte for byte, and signs what it did.
		path := killedWriter(t, 5)
		b := fileBytes(t, path)
		edited := bytes.Replace(b, []byte("docs/2.md"), []byte("docs/X.md"), 1)
		require.NoError(t, os.WriteFile(path, edited, 0o600))
		info, err := Repair(path)
		require.NoError(t, err)
		assert.Equal(t, RepairCutForeign, info.Action, info.Summary())
		kept := fileBytes(t, fmt.Sprintf("%s%s%d", path, repairForeignPart, 6))
		assert.Equal(t, string(edited[len(edited)-len(kept):]), string(kept))
		assert.Contains(t, string(kept), "docs/X.md")
		assertValid(t, path, 6)
	})
}

func mustLoadKey(t *testing.T, dir string) *Key {
	t.Helper()
	k, err := LoadOrCreateKey(dir)
	require.NoError(t, err)
	return k
}

// TestRepairRefusesAPlantedAsideName: the file a repair keeps the
// records it sets aside in is made anew; a symlink planted at its name
// is refused, never written through.
func TestRepairRefusesAPlantedAsideName(t *testing.T) {
	path := killedWriter(t, 5)
	appendRaw(t, path, `{"seq":9,"at":"2026-03-01T12:00:00.009000000Z","kind":"read","path":"oracle/x.md","mac":"AAAAAAAAAAAAAAAAAAAAAA"}`+"\n")
	target := filepath.Join(t.TempDir(), "elsewhere")
	require.NoError(t, os.WriteFile(target, []byte("kept\n"), 0o600))
	require.NoError(t, os.Symlink(target, path+repairForeignPart+"9"))
	_, err := Repair(path)
	require.Error(t, err)
	assert.Equal(t, "kept\n", string(fileBytes(t, target)))
}
