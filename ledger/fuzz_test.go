package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
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
	`{"seq":1,"version":7,"at":"","kind":"read"}` + "\n",
	// Version 3 lines: no chain, no key, a short seal (faked here).
	`{"seq":5,"at":"2026-03-01T12:00:00.005000000Z","kind":"read","path":"x"}` + "\n",
	`{"seq":5,"at":"2026-03-01T12:00:00.005000000Z","kind":"read","agent":"","mac":"AAAAAAAAAAAAAAAAAAAAAA"}` + "\n",
	`{"seq":5,"at":"2026-03-01T12:00:00.005000000Z","kind":"read","path":"x","mac":"AAAAAAAAAAAAAAAAAAAAAA"}`,
}

// fuzzVersions are the formats the fuzz targets write their valid
// prefixes in.
var fuzzVersions = []int64{Version2, Version3}

// fuzzPrefixes are valid three-record ledgers (and their closing
// checkpoint), one per version in fuzzVersions.
func fuzzPrefixes(f *testing.F) [][]byte {
	var out [][]byte
	for _, v := range fuzzVersions {
		b, err := os.ReadFile(writeLedgerV(f, 3, v))
		require.NoError(f, err)
		out = append(out, b)
	}
	return out
}

// FuzzVerifyStream feeds arbitrary bytes to the verifier, alone and after
// a valid prefix of each version. It must never panic or fail with an
// I/O error; when it calls the ledger valid, an independent line-by-line
// check must agree; and bytes that do not form sealed records continuing
// the chain must be reported as a problem after the prefix.
func FuzzVerifyStream(f *testing.F) {
	prefixes := fuzzPrefixes(f)
	for _, p := range prefixes {
		f.Add(p)
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := VerifyStream(bytes.NewReader(data))
		var ve *VersionError
		if !errors.As(err, &ve) {
			// A file in a version this package does not read is refused
			// whole; any other error would be an I/O error.
			require.NoError(t, err)
			checkReport(t, data, rep)
		}

		for _, prefix := range prefixes {
			whole := append(bytes.Clone(prefix), data...)
			rep, err = VerifyStream(bytes.NewReader(whole))
			require.NoError(t, err)
			checkReport(t, whole, rep)
			require.GreaterOrEqual(t, rep.Records, int64(4), "the valid prefix must verify whatever follows")
			if len(data) > 0 && data[len(data)-1] != '\n' {
				require.False(t, rep.OK(), "a ledger without a final newline must be reported")
			}
			if rep.Problem != nil {
				require.Greater(t, rep.Problem.Line, int64(4))
			}
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
		var before map[string]any // version 3: the record before, whole
		version := int64(0)
		for i, l := range lines {
			require.True(t, bytes.HasSuffix(l, []byte("\n")), "line %d of a valid ledger has no newline", i+1)
			line := bytes.TrimSuffix(l, []byte("\n"))
			r, err := decodeLine(line)
			require.NoError(t, err, "line %d of a valid ledger does not decode", i+1)
			if i == 0 {
				version = max(r.Version, Version1)
			}
			require.Equal(t, int64(i+1), r.Seq)
			if version >= Version3 && r.Sig == "" {
				before = checkV3Independently(t, line, before, i == 0)
				prev = v3Hash(string(line), prev)
				continue
			}
			require.Equal(t, prev, r.Prev)
			want, err := HashRecord(r)
			require.NoError(t, err)
			require.Equal(t, want, r.Hash)
			again, err := newEncoder().appendLine(nil, &r)
			require.NoError(t, err)
			require.Equal(t, string(l), string(again), "line %d of a valid ledger is not canonical", i+1)
			prev = r.Hash
			before = map[string]any{}
			for _, k := range []string{"agent", "grant", "pid"} {
				if v, ok := wholeFields(t, line)[k]; ok {
					before[k] = v
				}
			}
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

// wholeFields decodes a line into a map: which fields it writes, and
// their values.
func wholeFields(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(line, &m))
	return m
}

// checkV3Independently checks an unsigned line of a valid version 3 file
// against the format as docs/ledger.md states it, with encoding/json
// alone: no key, prev or hash; agent, grant and pid written exactly when
// they differ from the record before's (before: its values; first: the
// line starts the file); otherwise the canonical form. It returns the
// record's agent, grant and pid.
func checkV3Independently(t *testing.T, line []byte, before map[string]any, first bool) map[string]any {
	t.Helper()
	m := wholeFields(t, line)
	for _, k := range []string{"key", "prev", "hash"} {
		require.NotContains(t, m, k, "an unsigned version 3 line carries no %s", k)
	}
	type lineV3 struct {
		Seq     int64    `json:"seq"`
		Version int64    `json:"version,omitempty"`
		At      string   `json:"at"`
		Kind    string   `json:"kind"`
		Agent   *string  `json:"agent,omitempty"`
		Grant   *string  `json:"grant,omitempty"`
		Path    string   `json:"path,omitempty"`
		Op      string   `json:"op,omitempty"`
		PID     *float64 `json:"pid,omitempty"`
		SHA256  string   `json:"sha256,omitempty"`
		Count   int64    `json:"count,omitempty"`
		First   string   `json:"first,omitempty"`
		Last    string   `json:"last,omitempty"`
		Detail  string   `json:"detail,omitempty"`
		MAC     string   `json:"mac,omitempty"`
	}
	var l lineV3
	require.NoError(t, json.Unmarshal(line, &l))
	now := map[string]any{}
	for k, v := range before {
		now[k] = v
	}
	empty := map[string]any{"agent": "", "grant": "", "pid": float64(0)}
	for _, k := range []string{"agent", "grant", "pid"} {
		v, written := m[k]
		was, ok := now[k]
		if !ok || first {
			was = empty[k]
		}
		if written {
			require.NotEqual(t, was, v, "%s written though it is the record before's", k)
			now[k] = v
		} else {
			now[k] = was
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(l))
	require.Equal(t, string(line)+"\n", buf.String(), "not the canonical form")
	return now
}

// FuzzOpenTail opens a writer, holding the ledger's key, on a valid
// prefix of each version followed by arbitrary bytes. Open must not
// panic; when it succeeds, a torn tail is cut and recorded, and the next
// record continues the chain from the last complete line, in the file's
// version. Complete records already in the file are never changed.
func FuzzOpenTail(f *testing.F) {
	prefixes := fuzzPrefixes(f)
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, prefix := range prefixes {
			openTail(t, fuzzVersions[i], prefix, data)
		}
	})
}

// openTail is FuzzOpenTail on one prefix.
func openTail(t *testing.T, version int64, prefix, data []byte) {
	dir := t.TempDir()
	key := testKey(t, 7) // the key writeLedgerV seals with
	require.NoError(t, writeKeyFile(dir, key))
	path := filepath.Join(dir, "l.jsonl")
	whole := append(bytes.Clone(prefix), data...)
	require.NoError(t, os.WriteFile(path, whole, 0o600))
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock(), Key: key})
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
	recs := writtenAfter(t, version, after, keep, lines)
	want := []Kind{KindRead, KindSignedCheckpoint}
	if torn {
		want = append([]Kind{KindRepair}, want...)
	}
	require.Len(t, recs, len(want))
	for i, r := range recs {
		require.Equal(t, want[i], r.Kind)
	}
	if torn {
		require.Equal(t, digest.Bytes(whole[keep:]), recs[0].SHA256)
		require.Equal(t, recs[0].Hash, rec.Prev)
	}
	require.Equal(t, rec, recs[len(recs)-2])
	last, err := readTail(bytes.NewReader(after), int64(len(after)))
	require.NoError(t, err)
	require.Equal(t, recs[len(recs)-1].Seq, last.seq)
	require.Equal(t, recs[len(recs)-1].Hash, last.hash)
	if bytes.IndexByte(data, '\n') < 0 {
		// Nothing but a torn line after the prefix: the whole file is
		// sound.
		rep, err := VerifyStream(bytes.NewReader(after))
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Problem)
	}
}

// writtenAfter returns the records of lines, the whole lines a writer
// wrote at keep, and checks they are canonical and linked to the last
// complete line before them.
func writtenAfter(t *testing.T, version int64, after []byte, keep int, lines [][]byte) []Record {
	t.Helper()
	before, err := readTail(bytes.NewReader(after[:keep]), int64(keep))
	require.NoError(t, err)
	var recs []Record
	if version < Version3 {
		prev := before.hash
		for _, l := range lines {
			r, kind, reason := newEncoder().checkLine(bytes.TrimSuffix(l, []byte("\n")))
			require.Empty(t, kind, reason)
			require.Equal(t, prev, r.Prev)
			prev = r.Hash
			recs = append(recs, r)
		}
		return recs
	}
	tl, err := linkLines(bytes.NewReader(after), int64(keep), int64(len(after)), before.pos(), true)
	require.NoError(t, err)
	require.Equal(t, before.seq+int64(len(lines)), tl.seq)
	var fl fastLine
	ctx, prev := before.ctx, []byte(before.hash)
	for i, l := range lines {
		line := bytes.TrimSuffix(l, []byte("\n"))
		_, kind, reason := checkV3(newEncoder(), newFastHasher(), &fl, line, &ctx, prev, keep == 0 && i == 0, parseFast(line, &fl, true))
		require.Empty(t, kind, reason)
		r := fl.record()
		prev = []byte(r.Hash)
		recs = append(recs, r)
	}
	return recs
}

// TestFuzzSeedsReportGarbage spells out what the seeds must give after a
// valid prefix of each version, so that a regression names the seed.
func TestFuzzSeedsReportGarbage(t *testing.T) {
	for _, v := range fuzzVersions {
		b, err := os.ReadFile(writeLedgerV(t, 3, v))
		require.NoError(t, err)
		for _, s := range fuzzSeeds {
			rep, err := VerifyStream(bytes.NewReader(append(bytes.Clone(b), s...)))
			require.NoError(t, err)
			if s == "" {
				require.True(t, rep.OK())
				continue
			}
			if rep.OK() {
				// A record that continues the chain: only its missing
				// signature tells it.
				dir := t.TempDir()
				require.NoError(t, ensurePublic(dir, testKey(t, 7)))
				path := filepath.Join(dir, "l.jsonl")
				require.NoError(t, os.WriteFile(path, append(bytes.Clone(b), s...), 0o600))
				rep, err = Verify(path)
				require.NoError(t, err)
				require.NotNil(t, rep.Problem, "v%d: seed %q", v, s)
				require.Equal(t, ProblemUnsignedTail, rep.Problem.Kind)
			}
			require.False(t, rep.OK(), "v%d: seed %q", v, s)
			require.Equal(t, int64(5), rep.Problem.Line, "v%d: seed %q (after 3 records and a checkpoint)", v, s)
		}
	}
}
