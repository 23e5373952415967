package ledger

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/digest"
)

var update = flag.Bool("update", false, "rewrite testdata/ledger golden files")

func splitLines(b []byte) [][]byte {
	return bytes.SplitAfter(bytes.TrimSuffix(b, nil), []byte("\n"))
}

// TestVerifyDetectsTampering checks a version 2 file (lines that carry
// their chain) without its closing checkpoint: the chain alone.
func TestVerifyDetectsTampering(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(lines [][]byte) [][]byte // lines keep their "\n"; 10 records
		seq     int64
		kind    string
		records int64
	}{
		{"edit", func(l [][]byte) [][]byte {
			l[4] = bytes.Replace(l[4], []byte("docs/5.md"), []byte("docs/X.md"), 1)
			return l
		}, 5, ProblemHash, 4},
		{"remove", func(l [][]byte) [][]byte { return append(l[:4:4], l[5:]...) }, 5, ProblemSeq, 4},
		{"reorder", func(l [][]byte) [][]byte { l[4], l[5] = l[5], l[4]; return l }, 5, ProblemSeq, 4},
		{"insert copy", func(l [][]byte) [][]byte {
			return append(append(l[:4:4], l[2]), l[4:]...)
		}, 5, ProblemSeq, 4},
		{"insert forged seq", func(l [][]byte) [][]byte {
			// Right seq, wrong prev, honest own hash: caught by the link.
			r, err := decodeLine(bytes.TrimSuffix(l[4], []byte("\n")))
			require.NoError(t, err)
			r.Path, r.Prev = "forged.md", strings.Repeat("0", 64)
			line, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			return append(append(l[:4:4], line), l[4:]...)
		}, 5, ProblemPrev, 4},
		{"renumbered tail", func(l [][]byte) [][]byte {
			// Drop record 3 and reseal 4 as 3 with its own hash recomputed.
			r, err := decodeLine(bytes.TrimSuffix(l[3], []byte("\n")))
			require.NoError(t, err)
			r.Seq = 3
			line, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			return append(append(l[:2:2], line), l[4:]...)
		}, 3, ProblemPrev, 2},
		{"garbage line", func(l [][]byte) [][]byte {
			return append(append(l[:7:7], []byte("hello\n")), l[7:]...)
		}, 8, ProblemGarbage, 7},
		{"blank line", func(l [][]byte) [][]byte {
			return append(append(l[:7:7], []byte("\n")), l[7:]...)
		}, 8, ProblemGarbage, 7},
		{"unknown field", func(l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`{"seq"`), []byte(`{"x":1,"seq"`), 1)
			return l
		}, 2, ProblemGarbage, 1},
		{"reformatted", func(l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`,"at"`), []byte(`, "at"`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"duplicate key", func(l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`"agent":"a"`), []byte(`"agent":"b","agent":"a"`), 1)
			return l
		}, 2, ProblemNonCanonical, 1},
		{"torn tail", func(l [][]byte) [][]byte {
			return append(l, []byte(`{"seq":11,"at":"2026`))
		}, 11, ProblemTorn, 10},
		{"torn record without newline", func(l [][]byte) [][]byte {
			l[9] = bytes.TrimSuffix(l[9], []byte("\n"))
			return l
		}, 10, ProblemTorn, 9},
		{"first record removed", func(l [][]byte) [][]byte { return l[1:] }, 1, ProblemSeq, 0},
		// The head file keeps the closing checkpoint (seq 11): cutting
		// records off the end shows.
		{"last record removed", func(l [][]byte) [][]byte { return l[:9] }, 10, ProblemTruncated, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLedgerV(t, 10, Version2)
			lines := splitLines(fileBytes(t, path))
			lines = lines[:len(lines)-1] // SplitAfter leaves an empty last element
			require.Len(t, lines, 11, "10 records and the closing checkpoint")
			lines = lines[:10] // the chain alone (no public key here)
			require.NoError(t, os.WriteFile(path, bytes.Join(tt.tamper(lines), nil), 0o600))
			rep, err := Verify(path)
			require.NoError(t, err)
			assert.Equal(t, tt.records, rep.Records)
			if tt.kind == "" {
				// Cutting the tail is invisible without a kept hash: that is
				// why verify prints the last hash.
				assert.True(t, rep.OK())
				return
			}
			require.NotNil(t, rep.Problem)
			assert.Equal(t, tt.seq, rep.Problem.Seq, rep.Problem.Error())
			assert.Equal(t, tt.kind, rep.Problem.Kind, rep.Problem.Error())
			assert.NotEmpty(t, rep.Problem.Reason)
		})
	}
}

func TestVerifyEmptyAndMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	_, err := Verify(path)
	require.Error(t, err)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK())
	assert.Zero(t, rep.Records)
}

func TestRepairTornTail(t *testing.T) {
	path := writeLedger(t, 5)
	torn := `{"seq":6,"at":"2026-03-01T12:00:00.0`
	appendRaw(t, path, torn)
	rep, err := Verify(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Problem)
	require.Equal(t, ProblemTorn, rep.Problem.Kind)

	before := fileBytes(t, path)
	info, err := Repair(path)
	require.NoError(t, err)
	require.NotNil(t, info)
	assert.Equal(t, int64(len(torn)), info.Bytes)
	assert.Equal(t, int64(len(before)-len(torn)), info.Offset)
	assert.Equal(t, digest.Bytes([]byte(torn)), info.SHA256)
	assert.Equal(t, KindRepair, info.Record.Kind)
	assert.Equal(t, int64(7), info.Record.Seq, "after 5 records and the closing checkpoint")
	assert.Contains(t, info.Record.Detail, fmt.Sprintf("%d bytes", len(torn)))
	after := fileBytes(t, path)
	assert.Equal(t, before[:info.Offset], after[:info.Offset], "history is never rewritten")

	rep, err = Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep.Problem)
	assert.Equal(t, int64(7), rep.Records)
	require.Len(t, rep.Repairs, 1)
	assert.Equal(t, info.SHA256, rep.Repairs[0].SHA256)

	// Nothing left to repair.
	info, err = Repair(path)
	require.NoError(t, err)
	assert.Nil(t, info)
	_, err = Repair(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

func TestRepairTornOnlyLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"seq":1,`), 0o600))
	info, err := Repair(path)
	require.NoError(t, err)
	require.NotNil(t, info)
	assert.Equal(t, int64(0), info.Offset)
	assert.Equal(t, int64(1), info.Record.Seq)
	assertValid(t, path, 1)
}

// The golden ledger pins the canonical form of the current version: if
// encoding ever changes, ledgers written now would stop verifying. The
// ledgers of earlier versions must keep verifying.
func TestGoldenLedger(t *testing.T) {
	golden := filepath.Join("..", "testdata", "ledger", fmt.Sprintf("golden-v%d.jsonl", CurrentVersion))
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock(), Key: testKey(t, 7)})
	require.NoError(t, err)
	for _, r := range []Record{
		{Kind: KindGrantCreated, Agent: "reviewer", Grant: "G-reviewer", Detail: "may_read 2 patterns"},
		{Kind: KindMountStarted, Agent: "reviewer", Grant: "G-reviewer", PID: 4242, Detail: "/mnt/reviewer"},
		{Kind: KindList, Agent: "reviewer", Grant: "G-reviewer", Path: "", Op: "readdir", PID: 4243},
		{Kind: KindRead, Agent: "reviewer", Grant: "G-reviewer", Path: "deliverables/design-spec.md", Op: "open", PID: 4243,
			SHA256: strings.Repeat("ab", 32)},
		{Kind: KindDenied, Agent: "reviewer", Grant: "G-reviewer", Path: "oracle/answers.md", Op: "write", PID: 4243,
			Detail: `write outside may_write: <script>alert("x")</script> & "quotes"` + "\u2028 \x01"},
		{Kind: KindAppendRejected, Agent: "reviewer", Grant: "G-reviewer", Path: "events.jsonl", Op: "append", PID: 4243,
			Detail: "review_submitted: not in phase reviewing — réessayez / 再試行"},
	} {
		_, err := w.Append(r)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	got := fileBytes(t, path)
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	rep, err := Verify(golden)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.Equal(t, int64(7), rep.Records, "six records and the closing checkpoint")

	old := []struct {
		name    string
		records int64
		version int64
	}{
		// Version 1, before files stated their version.
		{"golden.jsonl", 7, Version1},
		// Version 1, written before records were sealed: still verifies
		// as a chain.
		{"golden-unsealed.jsonl", 6, Version1},
		// Version 2: every line with its chain, seal and key.
		{"golden-v2.jsonl", 7, Version2},
	}
	for _, tt := range old {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join("..", "testdata", "ledger", tt.name)
			lines := splitLines(fileBytes(t, p))
			first, err := decodeLine(bytes.TrimSuffix(lines[0], []byte("\n")))
			require.NoError(t, err)
			assert.Equal(t, tt.version, max(first.Version, Version1))
			rep, err := Verify(p)
			require.NoError(t, err)
			require.True(t, rep.OK(), "%v", rep.Problem)
			assert.Equal(t, tt.records, rep.Records)
			var recs []Record
			require.NoError(t, Scan(p, Filter{}, func(r Record) error { recs = append(recs, r); return nil }))
			require.Len(t, recs, int(tt.records), "read as version %d", tt.version)
			for i, r := range recs {
				// Every line of these versions carries its chain.
				assert.Contains(t, string(lines[i]), `"prev":"`+r.Prev+`","hash":"`+r.Hash+`"}`)
			}
		})
	}
}

// signedFixture is a sound signed ledger: reads 1–99, a denied record
// whose detail only the slow path reads (100), checkpoints at 101, 202 and
// 253.
func signedFixture(t *testing.T, key *Key) *fixture { return signedFixtureV(t, key, Version1) }

// signedFixtureV is signedFixture in a format version.
func signedFixtureV(t *testing.T, key *Key, version int64) *fixture {
	return newFixtureV(t, key, version).reads(99).
		add(Record{Kind: KindDenied, Agent: "a", Path: "oracle/x.md", Detail: "say \"no\" \u2028 <&> \\"}, sealNone).
		checkpoint().reads(100).checkpoint().reads(50).checkpoint()
}

// writeWithHead writes f's records and a head naming its last checkpoint.
func writeWithHead(f *fixture, path string) {
	f.write(path)
	f.writeHead(path, f.last(KindSignedCheckpoint))
}

// TestVerifySignatures tampers with a signed ledger in every way verify
// names, in the format of the first version (the lines versions 1 and 2
// write) and of version 3.
func TestVerifySignatures(t *testing.T) {
	key, other := testKey(t, 1), testKey(t, 2)
	tests := []struct {
		name string
		// setup writes the ledger at path from the sound fixture f.
		setup   func(t *testing.T, f *fixture, path string) VerifyOptions
		kind    string // "" for a sound ledger
		seq     int64
		records int64
		warning string // a warning that must be given
		only    int64  // the version the row is for (0: every one)
	}{
		{"sound", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f, path)
			return VerifyOptions{}
		}, "", 0, 253, "", 0},
		{"record inserted, chain recomputed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			forged := Record{Kind: KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answer.md", At: f.recs[49].At}
			f.recs = append(f.recs[:50:50], append([]Record{forged}, f.recs[50:]...)...)
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 102, 101, "", 0},
		{"record edited", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f, path)
			raw := fileBytes(t, path)
			require.NoError(t, os.WriteFile(path, bytes.Replace(raw, []byte("docs/10.md"), []byte("docs/XX.md"), 1), 0o600))
			return VerifyOptions{}
		}, ProblemHash, 10, 9, "", Version1},
		// Version 3: the edited line carries no hash; the next one that
		// does (the checkpoint) no longer links to the chain.
		{"record edited", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f, path)
			raw := fileBytes(t, path)
			require.NoError(t, os.WriteFile(path, bytes.Replace(raw, []byte("docs/10.md"), []byte("docs/XX.md"), 1), 0o600))
			return VerifyOptions{}
		}, ProblemPrev, 101, 100, "", Version3},
		{"signed record edited", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f, path)
			lines := f.lines()
			lines[201] = bytes.Replace(lines[201], []byte(`"detail":"checkpoint"`), []byte(`"detail":"checkpoinT"`), 1)
			require.NoError(t, os.WriteFile(path, bytes.Join(lines, nil), 0o600))
			return VerifyOptions{}
		}, ProblemHash, 202, 201, "", 0},
		{"record edited, chain recomputed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[9].Path = "docs/XX.md"
			writeWithHead(f.rechain(), path)
			return VerifyOptions{}
		}, ProblemForged, 101, 100, "", 0},
		{"record removed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs = append(f.recs[:9:9], f.recs[10:]...)
			f.write(path)
			return VerifyOptions{}
		}, ProblemSeq, 10, 9, "", 0},
		{"record removed, chain recomputed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs = append(f.recs[:9:9], f.recs[10:]...)
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 100, 99, "", 0},
		{"records reordered", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[9], f.recs[10] = f.recs[10], f.recs[9]
			f.write(path)
			return VerifyOptions{}
		}, ProblemSeq, 10, 9, "", 0},
		{"records reordered, chain recomputed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[9], f.recs[10] = f.recs[10], f.recs[9]
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 101, 100, "", 0},
		{"checkpoint signature removed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[100].Sig, f.recs[100].Key = "", ""
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 101, 100, "", 0},
		{"checkpoint signature garbage", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[100].Sig = "AAAA"
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 101, 100, "", 0},
		{"signature copied from another checkpoint", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs[201].Sig = f.recs[100].Sig
			f.rechain().write(path)
			return VerifyOptions{}
		}, ProblemForged, 202, 201, "", 0},
		{"truncated at a record boundary, head kept", func(t *testing.T, f *fixture, path string) VerifyOptions {
			head := f.last(KindSignedCheckpoint)
			f.recs = f.recs[:202]
			f.write(path)
			f.writeHead(path, head)
			return VerifyOptions{}
		}, ProblemTruncated, 203, 202, "", 0},
		{"truncated back to a checkpoint, head gone", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs = f.recs[:202]
			f.write(path)
			return VerifyOptions{}
		}, "", 0, 202, "no head file", 0},
		{"truncated and rewritten past the head", func(t *testing.T, f *fixture, path string) VerifyOptions {
			head := f.last(KindSignedCheckpoint)
			f.recs = f.recs[:202]
			f.reads(60).rechain().write(path)
			f.writeHead(path, head)
			return VerifyOptions{}
		}, ProblemRewritten, 253, 252, "", 0},
		{"head forged", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.write(path)
			head := f.last(KindSignedCheckpoint)
			head.Sig = f.recs[100].Sig
			f.writeHead(path, head)
			return VerifyOptions{}
		}, ProblemForged, 253, 253, "", 0},
		{"head unsigned", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.write(path)
			head := f.last(KindSignedCheckpoint)
			head.Sig = ""
			f.writeHead(path, head)
			return VerifyOptions{}
		}, ProblemForged, 253, 253, "", 0},
		{"head not a record", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.write(path)
			require.NoError(t, os.WriteFile(HeadPath(path), []byte("hello\n"), 0o600))
			return VerifyOptions{}
		}, ProblemGarbage, 0, 253, "", 0},
		{"unsigned tail", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f.reads(5), path)
			return VerifyOptions{}
		}, ProblemUnsignedTail, 254, 258, "", 0},
		{"unsigned tail, live", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f.reads(5), path)
			return VerifyOptions{AllowUnsignedTail: true}
		}, "", 0, 258, "the last 5 record(s) (seq 254–258) carry no signature", 0},
		{"record appended with recomputed chain and a fake MAC", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs = append(f.recs, Record{Kind: KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answer.md",
				At: f.recs[252].At, Key: key.ID(), MAC: strings.Repeat("0", 64)})
			writeWithHead(f.rechain(), path)
			return VerifyOptions{}
		}, ProblemUnsignedTail, 254, 254, "", 0},
		{"nothing signed", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.recs = f.recs[:99]
			f.write(path)
			return VerifyOptions{}
		}, ProblemUnsignedTail, 1, 99, "", 0},
		{"unknown key", func(t *testing.T, f *fixture, path string) VerifyOptions {
			writeWithHead(f, path)
			return VerifyOptions{Keys: []PublicKey{other.Public()}}
		}, ProblemUnknownKey, 101, 100, "", 0},
		{"key rotated, both keys given", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.key = other
			writeWithHead(f.reads(10).checkpoint(), path)
			return VerifyOptions{Keys: []PublicKey{key.Public(), other.Public()}}
		}, "", 0, 264, "", 0},
		{"key rotated, old key only", func(t *testing.T, f *fixture, path string) VerifyOptions {
			f.key = other
			writeWithHead(f.reads(10).checkpoint(), path)
			return VerifyOptions{}
		}, ProblemUnknownKey, 264, 263, "", 0},
	}
	for _, version := range []int64{Version1, Version3} {
		for _, tt := range tests {
			if tt.only != 0 && tt.only != version {
				continue
			}
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				f := signedFixtureV(t, key, version)
				path := f.dir()
				rep, err := VerifyWith(path, tt.setup(t, f, path))
				require.NoError(t, err)
				assert.True(t, rep.SignaturesChecked)
				assert.Equal(t, tt.records, rep.Records)
				if tt.warning != "" {
					assert.Contains(t, strings.Join(rep.Warnings, "\n"), tt.warning)
				}
				if tt.kind == "" {
					require.Nil(t, rep.Problem, "%v", rep.Problem)
					return
				}
				require.NotNil(t, rep.Problem)
				t.Log(rep.Problem.Error())
				assert.Equal(t, tt.kind, rep.Problem.Kind, rep.Problem.Error())
				assert.Equal(t, tt.seq, rep.Problem.Seq, rep.Problem.Error())
				assert.NotEmpty(t, rep.Problem.Reason)
				assert.NotEmpty(t, rep.Problem.File)
			})
		}
	}
}

func TestVerifyReportsSigners(t *testing.T) {
	key, other := testKey(t, 1), testKey(t, 2)
	f := signedFixture(t, key)
	f.key = other
	f.reads(10).checkpoint().reads(3)
	path := f.dir()
	writeWithHead(f, path)
	rep, err := VerifyWith(path, VerifyOptions{Keys: []PublicKey{key.Public(), other.Public()}, AllowUnsignedTail: true})
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.Equal(t, []string{key.ID(), other.ID()}, rep.Keys)
	assert.Equal(t, []Signer{
		{Key: key.ID(), FirstSeq: 1, LastSeq: 253, SignedCheckpoints: 3},
		{Key: other.ID(), FirstSeq: 254, LastSeq: 264, SignedCheckpoints: 1},
	}, rep.Signers)
	assert.Equal(t, int64(264), rep.SignedThrough)
	assert.Equal(t, int64(3), rep.Unsigned)
	assert.Equal(t, int64(264), rep.HeadSeq)
	assert.Equal(t, int64(267), rep.LastSeq)
	assert.Equal(t, f.recs[266].Hash, rep.LastHash)
	assert.Equal(t, f.recs[0].At, rep.FirstAt)
	assert.Equal(t, f.recs[266].At, rep.LastAt)
	assert.Equal(t, []string{path}, rep.Files)
	require.Len(t, rep.Warnings, 1)
	assert.Contains(t, rep.Warnings[0], "seq 265–267")
}

func TestVerifyWithoutKey(t *testing.T) {
	f := signedFixture(t, testKey(t, 1))
	f.recs[100].Sig = "" // would be forged, were signatures checked
	dir := t.TempDir()   // no ledger.pub
	path := filepath.Join(dir, "ledger.jsonl")
	f.rechain().write(path)
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.False(t, rep.SignaturesChecked)
	assert.Equal(t, []string{WarnNoKey}, rep.Warnings)
	assert.Empty(t, rep.Signers)
	assert.Zero(t, rep.Unsigned)

	// A ledger.pub that is not a public key is an error, not a pass.
	require.NoError(t, os.WriteFile(filepath.Join(dir, PublicKeyFile), []byte("nonsense\n"), 0o644))
	_, err = Verify(path)
	require.Error(t, err)
}

func TestSegments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	for _, name := range []string{"ledger.000000000101.jsonl", "ledger.000000000001.jsonl", "ledger.jsonl.head",
		"ledger.1.jsonl", "ledger.00000000001x.jsonl", "other.000000000001.jsonl", "ledger.0000000000011.jsonl"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	got, err := Segments(path)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "ledger.000000000001.jsonl"), filepath.Join(dir, "ledger.000000000101.jsonl"), path}, got)
	assert.Equal(t, filepath.Join(dir, "ledger.000000000101.jsonl"), SegmentName(path, 101))
	assert.Equal(t, filepath.Join(dir, "l.000000000007.jsonl"), SegmentName(filepath.Join(dir, "l"), 7))
}

// segmentedFixture has three files: 1–52 (segment_end at 52), 53–105
// (segment_start at 53, segment_end at 105), then the live file from 106
// (segment_start) to its checkpoint at 127.
func segmentedFixture(t *testing.T, key *Key) *fixture { return segmentedFixtureV(t, key, Version1) }

// segmentedFixtureV is segmentedFixture in a format version.
func segmentedFixtureV(t *testing.T, key *Key, version int64) *fixture {
	return newFixtureV(t, key, version).reads(50).checkpoint().newSegment().reads(50).checkpoint().newSegment().reads(20).checkpoint()
}

func TestVerifySegments(t *testing.T) {
	key := testKey(t, 1)
	tests := []struct {
		name    string
		setup   func(t *testing.T, f *fixture, path string, files []string)
		kind    string
		seq     int64
		records int64
		file    int   // index of the file the problem names
		only    int64 // the version the row is for (0: every one)
	}{
		{"sound", func(t *testing.T, f *fixture, path string, files []string) {}, "", 0, 127, 0, 0},
		{"middle segment missing", func(t *testing.T, f *fixture, path string, files []string) {
			require.NoError(t, os.Remove(files[1]))
		}, ProblemSeq, 53, 52, 2, 0},
		{"segments swapped", func(t *testing.T, f *fixture, path string, files []string) {
			a, b := fileBytes(t, files[0]), fileBytes(t, files[1])
			require.NoError(t, os.WriteFile(files[0], b, 0o600))
			require.NoError(t, os.WriteFile(files[1], a, 0o600))
		}, ProblemSeq, 1, 0, 0, 0},
		{"segment end cut", func(t *testing.T, f *fixture, path string, files []string) {
			lines := splitLines(fileBytes(t, files[0]))
			require.NoError(t, os.WriteFile(files[0], bytes.Join(lines[:len(lines)-2], nil), 0o600))
		}, ProblemSegment, 52, 51, 0, 0},
		{"live file lost", func(t *testing.T, f *fixture, path string, files []string) {
			require.NoError(t, os.Remove(path))
		}, ProblemTruncated, 106, 105, 2, 0},
		{"file split where no writer sealed", func(t *testing.T, f *fixture, path string, files []string) {
			// Move the live file's first records into the segment before it.
			lines := splitLines(fileBytes(t, path))
			seg := append(fileBytes(t, files[1]), bytes.Join(lines[:3], nil)...)
			require.NoError(t, os.WriteFile(files[1], seg, 0o600))
			require.NoError(t, os.WriteFile(path, bytes.Join(lines[3:], nil), 0o600))
		}, ProblemSegment, 109, 108, 1, Version1},
		// Version 3 states the version on each segment_start: one in the
		// middle of a file is no writer's.
		{"file split where no writer sealed", func(t *testing.T, f *fixture, path string, files []string) {
			lines := splitLines(fileBytes(t, path))
			seg := append(fileBytes(t, files[1]), bytes.Join(lines[:3], nil)...)
			require.NoError(t, os.WriteFile(files[1], seg, 0o600))
			require.NoError(t, os.WriteFile(path, bytes.Join(lines[3:], nil), 0o600))
		}, ProblemNonCanonical, 106, 105, 1, Version3},
	}
	for _, version := range []int64{Version1, Version3} {
		for _, tt := range tests {
			if tt.only != 0 && tt.only != version {
				continue
			}
			t.Run(fmt.Sprintf("v%d/%s", version, tt.name), func(t *testing.T) {
				f := segmentedFixtureV(t, key, version)
				path := f.dir()
				files := f.writeSegments(path)
				require.Len(t, files, 3)
				f.writeHead(path, f.last(KindSignedCheckpoint))
				tt.setup(t, f, path, files)
				rep, err := Verify(path)
				require.NoError(t, err)
				assert.Equal(t, tt.records, rep.Records)
				if tt.kind == "" {
					require.Nil(t, rep.Problem, "%v", rep.Problem)
					assert.Equal(t, files, rep.Files)
					assert.Equal(t, []Signer{{Key: key.ID(), FirstSeq: 1, LastSeq: 127, SignedCheckpoints: 7}}, rep.Signers)
					var seqs []int64
					require.NoError(t, Scan(path, Filter{}, func(r Record) error { seqs = append(seqs, r.Seq); return nil }))
					require.Len(t, seqs, 127)
					for i, s := range seqs {
						require.Equal(t, int64(i+1), s)
					}
					return
				}
				require.NotNil(t, rep.Problem)
				t.Log(rep.Problem.Error())
				assert.Equal(t, tt.kind, rep.Problem.Kind, rep.Problem.Error())
				assert.Equal(t, tt.seq, rep.Problem.Seq, rep.Problem.Error())
				assert.Equal(t, files[tt.file], rep.Problem.File, rep.Problem.Error())
			})
		}
	}
}

// A file after a sealed segment must start with segment_start: a writer
// always begins a new segment with one.
func TestVerifySegmentWithoutStart(t *testing.T) {
	f := newFixture(t, testKey(t, 1)).reads(50).checkpoint().
		add(Record{Kind: KindSegmentEnd, Detail: "segment sealed"}, sealSig).reads(5).checkpoint()
	path := f.dir()
	lines := f.lines()
	require.NoError(t, os.WriteFile(SegmentName(path, 1), bytes.Join(lines[:52], nil), 0o600))
	require.NoError(t, os.WriteFile(path, bytes.Join(lines[52:], nil), 0o600))
	rep, err := Verify(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Problem)
	assert.Equal(t, ProblemSegment, rep.Problem.Kind, rep.Problem.Error())
	assert.Equal(t, int64(53), rep.Problem.Seq)
	assert.Equal(t, path, rep.Problem.File)
	assert.Equal(t, int64(1), rep.Problem.Line)
	assert.Equal(t, int64(52), rep.Records)
}

// The signed golden ledgers (a sealed segment, the live file, its head
// and ledger.pub) pin what is signed and how, in the lines of version 1
// (signed/, which versions 1 and 2 share) and of version 3 (signed-v3/):
// if signing ever changes, old ledgers would stop verifying. The CLI
// tests tamper with copies of them.
func TestSignedGoldenLedger(t *testing.T) {
	for _, tt := range []struct {
		dir     string
		version int64
	}{{"signed", Version1}, {"signed-v3", Version3}} {
		t.Run(tt.dir, func(t *testing.T) { signedGolden(t, tt.dir, tt.version) })
	}
}

func signedGolden(t *testing.T, name string, version int64) {
	golden := filepath.Join("..", "testdata", "ledger", name)
	f := newFixtureV(t, testKey(t, 42), version)
	f.add(Record{Kind: KindMountStarted, Agent: "reviewer", Grant: "G-reviewer", PID: 4242, Detail: "/mnt/reviewer"}, sealNone)
	f.add(Record{Kind: KindRead, Agent: "reviewer", Grant: "G-reviewer", Path: "docs/brief.md", Op: "open", PID: 4243,
		SHA256: strings.Repeat("ab", 32)}, sealMAC)
	f.checkpoint().newSegment()
	f.add(Record{Kind: KindDenied, Agent: "reviewer", Grant: "G-reviewer", Path: "oracle/answers.md", Op: "open", PID: 4243,
		Detail: `read outside may_read: "oracle/**"`}, sealNone)
	f.add(Record{Kind: KindReadRepeat, Agent: "reviewer", Grant: "G-reviewer", Path: "docs/brief.md", SHA256: strings.Repeat("ab", 32),
		Count: 41, First: "2026-03-01T12:00:00.010000000Z", Last: "2026-03-01T12:00:09.990000000Z"}, sealMAC)
	f.add(Record{Kind: KindMountStopped, Agent: "reviewer", Grant: "G-reviewer", PID: 4242}, sealNone)
	f.checkpoint()
	dir := filepath.Dir(f.dir())
	path := filepath.Join(dir, "communication_ledger.jsonl")
	f.writeSegments(path)
	f.writeHead(path, f.last(KindSignedCheckpoint))
	if *update {
		require.NoError(t, os.RemoveAll(golden))
		require.NoError(t, os.CopyFS(golden, os.DirFS(dir)))
	}
	for _, name := range []string{"communication_ledger.000000000001.jsonl", "communication_ledger.jsonl", "communication_ledger.jsonl.head", PublicKeyFile} {
		want, err := os.ReadFile(filepath.Join(golden, name))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(fileBytes(t, filepath.Join(dir, name))), name)
	}
	rep, err := Verify(filepath.Join(golden, "communication_ledger.jsonl"))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)
	assert.True(t, rep.SignaturesChecked)
	assert.Equal(t, int64(9), rep.Records)
	assert.Len(t, rep.Files, 2)
	assert.Equal(t, int64(9), rep.HeadSeq)
	assert.Equal(t, []Signer{{Key: f.key.ID(), FirstSeq: 1, LastSeq: 9, SignedCheckpoints: 4}}, rep.Signers)
	assert.Empty(t, rep.Warnings)
	var got []Record
	require.NoError(t, Scan(filepath.Join(golden, "communication_ledger.jsonl"), Filter{}, func(r Record) error { got = append(got, r); return nil }))
	assert.Equal(t, f.recs, got, "read back whole")
}
