package ledger

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/digest"
)

// fuzzSeeds are ledger tails a crash, an editor or an attacker could
// leave after a valid prefix.
var fuzzSeeds = []string{
	"",
	"\n",
	"hello\n",
	`{"seq":4,"at":"2026`,
	`{"seq":4,"at":"2026-03-01T12:00:00.004000000Z","kind":"read","prev":"","hash":""}` + "\n",
	`{"seq":4,"x":1}` + "\n",
	`[]` + "\n",
	`null` + "\n",
	`{"seq":4}{"seq":5}` + "\n",
	`{"seq":"4"}` + "\n",
	"{\"seq\":4,\"kind\":\"\xff\"}\n",
	`{"seq":9223372036854775807,"at":"","kind":"read","prev":"","hash":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}` + "\n",
	"\x00\x01\x02",
	"\r\n",
}

// fuzzPrefix is a valid three-record ledger.
func fuzzPrefix(f *testing.F) []byte {
	b, err := os.ReadFile(writeLedger(f, 3))
	require.NoError(f, err)
	return b
}

// FuzzVerifyStream feeds arbitrary bytes to the verifier, alone and after
// a valid prefix. It must never panic or fail with an I/O error; when it
// calls the ledger valid, an independent line-by-line check must agree;
// and bytes that do not form sealed records continuing the chain must be
// reported as a problem after the prefix.
func FuzzVerifyStream(f *testing.F) {
	prefix := fuzzPrefix(f)
	f.Add(prefix)
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := VerifyStream(bytes.NewReader(data))
		require.NoError(t, err)
		checkReport(t, data, rep)

		whole := append(bytes.Clone(prefix), data...)
		rep, err = VerifyStream(bytes.NewReader(whole))
		require.NoError(t, err)
		checkReport(t, whole, rep)
		require.GreaterOrEqual(t, rep.Records, int64(3), "the valid prefix must verify whatever follows")
		if len(data) > 0 && data[len(data)-1] != '\n' {
			require.False(t, rep.OK(), "a ledger without a final newline must be reported")
		}
		if rep.Problem != nil {
			require.Greater(t, rep.Problem.Line, int64(3))
		}
	})
}

// checkReport checks rep against an independent reading of data.
func checkReport(t *testing.T, data []byte, rep *VerifyReport) {
	t.Helper()
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if rep.OK() {
		require.Equal(t, int64(len(lines)), rep.Records)
		prev := ""
		for i, l := range lines {
			require.True(t, bytes.HasSuffix(l, []byte("\n")), "line %d of a valid ledger has no newline", i+1)
			r, err := decodeLine(bytes.TrimSuffix(l, []byte("\n")))
			require.NoError(t, err, "line %d of a valid ledger does not decode", i+1)
			require.Equal(t, int64(i+1), r.Seq)
			require.Equal(t, prev, r.Prev)
			want, err := HashRecord(r)
			require.NoError(t, err)
			require.Equal(t, want, r.Hash)
			again, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			require.Equal(t, string(l), string(again), "line %d of a valid ledger is not canonical", i+1)
			prev = r.Hash
		}
		require.Equal(t, prev, rep.LastHash)
		return
	}
	p := rep.Problem
	assert.Contains(t, []string{ProblemGarbage, ProblemHash, ProblemNonCanonical, ProblemSeq, ProblemPrev, ProblemTorn}, p.Kind)
	assert.Equal(t, rep.LastSeq+1, p.Seq)
	assert.Equal(t, rep.Records+1, p.Line)
	assert.LessOrEqual(t, p.Line, int64(len(lines)))
	assert.NotEmpty(t, p.Reason)
	var off int64
	for _, l := range lines[:p.Line-1] {
		off += int64(len(l))
	}
	assert.Equal(t, off, p.Offset)
}

// FuzzOpenTail opens a writer on a valid prefix followed by arbitrary
// bytes. Open must not panic; when it succeeds, a torn tail is cut and
// recorded, and the next record continues the chain from the last
// complete line. Complete records already in the file are never changed.
func FuzzOpenTail(f *testing.F) {
	prefix := fuzzPrefix(f)
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "l.jsonl")
		whole := append(bytes.Clone(prefix), data...)
		require.NoError(t, os.WriteFile(path, whole, 0o600))
		w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock()})
		if err != nil {
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, whole, after, "a refused Open must not change the file")
			return
		}
		require.Less(t, w.seq, int64(math.MaxInt64), "Open must refuse a ledger whose seq cannot continue")
		torn := len(data) > 0 && data[len(data)-1] != '\n'
		require.Equal(t, torn, w.lastRepair != nil, "a torn tail is repaired, nothing else is")
		rec, err := w.Append(Record{Kind: KindRead, Agent: "fuzz", Path: "x"})
		require.NoError(t, err)
		require.NoError(t, w.Close())

		after, err := os.ReadFile(path)
		require.NoError(t, err)
		keep := bytes.LastIndexByte(whole, '\n') + 1
		require.Equal(t, whole[:keep], after[:keep], "complete lines must never be rewritten")
		rest := after[keep:]
		lines := bytes.SplitAfter(rest, []byte("\n"))
		require.Equal(t, []byte{}, lines[len(lines)-1], "the writer leaves whole lines")
		lines = lines[:len(lines)-1]
		if torn {
			require.Len(t, lines, 2)
			rp, err := decodeLine(bytes.TrimSuffix(lines[0], []byte("\n")))
			require.NoError(t, err)
			require.Equal(t, KindRepair, rp.Kind)
			require.Equal(t, digest.Bytes(whole[keep:]), rp.SHA256)
			require.Equal(t, rp.Seq+1, rec.Seq)
			require.Equal(t, rp.Hash, rec.Prev)
		} else {
			require.Len(t, lines, 1)
		}
		last, err := readTail(bytes.NewReader(after), int64(len(after)))
		require.NoError(t, err)
		require.Equal(t, rec.Seq, last.seq)
		require.Equal(t, rec.Hash, last.hash)
		_, kind, reason := newEncoder().checkLine(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
		require.Empty(t, kind, reason)
	})
}

// TestFuzzSeedsReportGarbage spells out what the seeds must give after a
// valid prefix, so that a regression names the seed.
func TestFuzzSeedsReportGarbage(t *testing.T) {
	b, err := os.ReadFile(writeLedger(t, 3))
	require.NoError(t, err)
	for _, s := range fuzzSeeds {
		rep, err := VerifyStream(bytes.NewReader(append(bytes.Clone(b), s...)))
		require.NoError(t, err)
		if s == "" {
			require.True(t, rep.OK())
			continue
		}
		require.False(t, rep.OK(), "seed %q", s)
		require.Equal(t, int64(5), rep.Problem.Line, "seed %q (after 3 records and a checkpoint)", s)
	}
}
