package ledger

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainAcross reads the sealed segments in order, then the live file,
// checks each line as verify does, and that seq and prev continue across
// them.
func chainAcross(t *testing.T, path string) []Record {
	t.Helper()
	rep, err := Verify(path)
	require.NoError(t, err)
	require.Nil(t, rep.Problem, "%v", rep.Problem)
	var all []Record
	require.NoError(t, Scan(path, Filter{}, func(r Record) error { all = append(all, r); return nil }))
	for i, r := range all {
		require.Equal(t, int64(i+1), r.Seq)
		if i > 0 {
			require.Equal(t, all[i-1].Hash, r.Prev, "seq %d", r.Seq)
		}
	}
	return all
}

func TestSegmentsCarryTheChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	opts := Options{Sync: SyncOff, SegmentBytes: 4 << 10}
	a, err := Open(path, opts)
	require.NoError(t, err)
	b, err := Open(path, opts)
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		w := a
		if i%3 == 0 {
			w = b
		}
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/some/file.md"})
		require.NoError(t, err, "record %d", i)
	}
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())

	all := chainAcross(t, path)
	key, err := LoadOrCreateKey(filepath.Dir(path))
	require.NoError(t, err)
	ends, starts, reads := 0, 0, 0
	for i, r := range all {
		switch r.Kind {
		case KindSegmentEnd:
			ends++
			assert.True(t, key.Public().checkSig(newEncoder(), &r), "segment_end seq %d is signed", r.Seq)
			require.Less(t, i+1, len(all))
			assert.Equal(t, KindSegmentStart, all[i+1].Kind, "a new segment starts right after")
		case KindSegmentStart:
			starts++
			assert.True(t, key.Public().checkSig(newEncoder(), &r))
		case KindRead:
			reads++
		}
	}
	assert.Equal(t, 200, reads)
	assert.GreaterOrEqual(t, ends, 5, "4 KiB segments of ~300-byte records")
	assert.Equal(t, ends, starts)
}

func TestInterruptedRotationIsFinished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	_, err = w.Append(Record{Kind: KindRead, Agent: "a"})
	require.NoError(t, err)
	// A rotation that stopped right after sealing the file.
	_, err = w.Append(Record{Kind: KindSegmentEnd, Detail: "sealed"})
	require.NoError(t, err)
	w.mu.Lock()
	w.closed = true // stop here, as a crash would (no closing checkpoint)
	w.mu.Unlock()
	require.NoError(t, w.f.Close())

	w, err = Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	_, err = w.Append(Record{Kind: KindRead, Agent: "a"})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	all := chainAcross(t, path)
	var kinds []Kind
	for _, r := range all {
		kinds = append(kinds, r.Kind)
	}
	assert.Equal(t, []Kind{KindRead, KindSegmentEnd, KindSegmentStart, KindRead, KindSignedCheckpoint}, kinds)
	assert.FileExists(t, filepath.Join(filepath.Dir(path), SegmentName("ledger.jsonl", 1)))
}
