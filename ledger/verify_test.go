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
)

var update = flag.Bool("update", false, "rewrite testdata/ledger golden files")

func splitLines(b []byte) [][]byte {
	return bytes.SplitAfter(bytes.TrimSuffix(b, nil), []byte("\n"))
}

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
		{"last record removed", func(l [][]byte) [][]byte { return l[:9] }, 0, "", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLedger(t, 10)
			lines := splitLines(fileBytes(t, path))
			lines = lines[:len(lines)-1] // SplitAfter leaves an empty last element
			require.Len(t, lines, 10)
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
	assert.Equal(t, sha256Hex([]byte(torn)), info.SHA256)
	assert.Equal(t, KindRepair, info.Record.Kind)
	assert.Equal(t, int64(6), info.Record.Seq)
	assert.Contains(t, info.Record.Detail, fmt.Sprintf("%d bytes", len(torn)))
	after := fileBytes(t, path)
	assert.Equal(t, before[:info.Offset], after[:info.Offset], "history is never rewritten")

	rep, err = Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK())
	assert.Equal(t, int64(6), rep.Records)
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

// The golden ledger pins the canonical form: if encoding ever changes,
// old ledgers would stop verifying.
func TestGoldenLedger(t *testing.T) {
	golden := filepath.Join("..", "testdata", "ledger", "golden.jsonl")
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock()})
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
	assert.Equal(t, int64(6), rep.Records)
}
