package ledger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sealMode says how a fixture record is authenticated.
type sealMode int

const (
	sealNone sealMode = iota
	sealMAC           // key + mac, as a writer marks the end of a batch
	sealSig           // key + sig, as checkpoints and segment records are
)

// testKey returns a deterministic key: seed n repeated.
func testKey(t testing.TB, n byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{n}, 32))
	require.NoError(t, err)
	return k
}

// chain seals records one after another as a signing writer does,
// without keeping them.
type chain struct {
	t     testing.TB
	key   *Key
	enc   *encoder
	clock func() time.Time
	seq   int64
	prev  string
}

func newChain(t testing.TB, key *Key) *chain {
	return &chain{t: t, key: key, enc: newEncoder(), clock: fixedClock()}
}

// next seals r as the next record and returns it with its line.
func (c *chain) next(r Record, m sealMode) (Record, []byte) {
	c.seq++
	r.Seq, r.Prev = c.seq, c.prev
	if r.At == "" {
		r.At = c.clock().UTC().Format(timeLayout)
	}
	if m != sealNone {
		require.NoError(c.t, c.key.seal(c.enc, &r, m == sealSig))
	}
	line, err := c.enc.appendLine(nil, &r)
	require.NoError(c.t, err)
	c.prev = r.Hash
	return r, line
}

// fixture is a ledger built in memory, to be tampered with and written.
type fixture struct {
	*chain
	recs []Record
}

func newFixture(t testing.TB, key *Key) *fixture { return &fixture{chain: newChain(t, key)} }

func (f *fixture) add(r Record, m sealMode) *fixture {
	r, _ = f.next(r, m)
	f.recs = append(f.recs, r)
	return f
}

// reads adds n read records, the last one of each batch of 8 with a MAC.
func (f *fixture) reads(n int) *fixture {
	for i := 0; i < n; i++ {
		m := sealNone
		if i%8 == 7 {
			m = sealMAC
		}
		f.add(Record{Kind: KindRead, Agent: "a", Grant: "G-a", Path: fmt.Sprintf("docs/%d.md", f.seq+1), PID: 42}, m)
	}
	return f
}

// checkpoint adds a signed checkpoint.
func (f *fixture) checkpoint() *fixture {
	return f.add(Record{Kind: KindSignedCheckpoint, Detail: "checkpoint"}, sealSig)
}

// rechain renumbers and relinks every record and recomputes each hash, as
// someone without the key would after an edit; signatures stay as they
// were.
func (f *fixture) rechain() *fixture {
	prev := ""
	for i := range f.recs {
		r := &f.recs[i]
		r.Seq, r.Prev = int64(i+1), prev
		h, err := HashRecord(*r)
		require.NoError(f.t, err)
		r.Hash = h
		prev = h
	}
	return f
}

// lines returns the line of every record, newline included.
func (f *fixture) lines() [][]byte {
	out := make([][]byte, len(f.recs))
	for i := range f.recs {
		r := f.recs[i]
		line, err := f.enc.appendLine(nil, &r)
		require.NoError(f.t, err)
		out[i] = line
	}
	return out
}

// last returns the last record of the kind.
func (f *fixture) last(kind Kind) Record {
	for i := len(f.recs) - 1; i >= 0; i-- {
		if f.recs[i].Kind == kind {
			return f.recs[i]
		}
	}
	f.t.Fatalf("no %s record", kind)
	return Record{}
}

// dir makes a run directory holding the key's ledger.pub (when the
// fixture has a key) and returns the ledger path in it.
func (f *fixture) dir() string {
	dir := f.t.TempDir()
	if f.key != nil {
		require.NoError(f.t, ensurePublic(dir, f.key))
	}
	return filepath.Join(dir, "ledger.jsonl")
}

// write writes the records to path as one file.
func (f *fixture) write(path string) {
	require.NoError(f.t, os.WriteFile(path, bytes.Join(f.lines(), nil), 0o600))
}

// writeHead writes rec as the head file of the ledger at path.
func (f *fixture) writeHead(path string, rec Record) {
	line, err := newEncoder().appendLine(nil, &rec)
	require.NoError(f.t, err)
	require.NoError(f.t, os.WriteFile(HeadPath(path), line, 0o600))
}

// writeSegments writes the records to path and its sealed segments: a new
// file starts at every segment_start record. It returns the files in order.
func (f *fixture) writeSegments(path string) []string {
	var groups [][]Record
	for _, r := range f.recs {
		if len(groups) == 0 || r.Kind == KindSegmentStart {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], r)
	}
	var names []string
	for i, g := range groups {
		name := path
		if i < len(groups)-1 {
			name = SegmentName(path, g[0].Seq)
		}
		var b []byte
		for _, r := range g {
			line, err := f.enc.appendLine(nil, &r)
			require.NoError(f.t, err)
			b = append(b, line...)
		}
		require.NoError(f.t, os.WriteFile(name, b, 0o600))
		names = append(names, name)
	}
	return names
}

// newSegment ends a segment: a signed segment_end, then a signed segment_start.
func (f *fixture) newSegment() *fixture {
	f.add(Record{Kind: KindSegmentEnd, Detail: "segment sealed"}, sealSig)
	return f.add(Record{Kind: KindSegmentStart, Detail: "segment started"}, sealSig)
}
