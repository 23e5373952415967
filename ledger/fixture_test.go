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
// without keeping them, in one file of a format version (version 1, with
// no version stated, unless set).
type chain struct {
	t       testing.TB
	key     *Key
	enc     *encoder
	clock   func() time.Time
	version int64
	pos     chainPos
	seq     int64
}

func newChain(t testing.TB, key *Key) *chain { return newChainV(t, key, Version1) }

func newChainV(t testing.TB, key *Key, version int64) *chain {
	return &chain{t: t, key: key, enc: newEncoder(), clock: fixedClock(), version: version, pos: chainPos{start: true}}
}

// next seals r as the next record and returns it with its line. The
// first record, and each segment_start, states the version (from
// version 2 on).
func (c *chain) next(r Record, m sealMode) (Record, []byte) {
	c.seq++
	r.Seq = c.seq
	if r.At == "" {
		r.At = c.clock().UTC().Format(timeLayout)
	}
	if c.version >= Version2 && (c.seq == 1 || r.Kind == KindSegmentStart) {
		r.Version = c.version
	}
	if r.Kind == KindSegmentStart {
		c.pos.start = true
	}
	line, err := c.enc.encodeNext(nil, &r, &c.pos, c.version, c.key, m == sealSig, m == sealMAC)
	require.NoError(c.t, err)
	c.pos.advance(&r)
	return r, line
}

// fixture is a ledger built in memory, to be tampered with and written.
type fixture struct {
	*chain
	recs []Record
}

func newFixture(t testing.TB, key *Key) *fixture { return &fixture{chain: newChain(t, key)} }

// newFixtureV is newFixture in a format version.
func newFixtureV(t testing.TB, key *Key, version int64) *fixture {
	return &fixture{chain: newChainV(t, key, version)}
}

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
	le := NewLineEncoder(max(f.version, Version2))
	for i := range f.recs {
		r := &f.recs[i]
		r.Seq = int64(i + 1)
		_, err := le.Encode(r)
		require.NoError(f.t, err)
	}
	return f
}

// lines returns the line of every record, newline included, as the
// records are (after a rechain, with the hashes it computed).
func (f *fixture) lines() [][]byte {
	out := make([][]byte, len(f.recs))
	for i := range f.recs {
		out[i] = f.line(i)
	}
	return out
}

// line returns the line of record i as it is: in version 3, an unsigned
// record is written against the one before it (nothing for the first
// record and after a segment boundary).
func (f *fixture) line(i int) []byte {
	r := f.recs[i]
	if f.version < Version3 || r.Sig != "" {
		line, err := f.enc.appendLine(nil, &r)
		require.NoError(f.t, err)
		return line
	}
	var base *lineCtx
	if i > 0 && f.recs[i].Kind != KindSegmentStart {
		base = &lineCtx{}
		base.setRecord(&f.recs[i-1])
	}
	return append(f.enc.appendV3(nil, &r, base, false), '\n')
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
	n := 0
	for i, g := range groups {
		name := path
		if i < len(groups)-1 {
			name = SegmentName(path, g[0].Seq)
		}
		var b []byte
		for range g {
			b = append(b, f.line(n)...)
			n++
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
