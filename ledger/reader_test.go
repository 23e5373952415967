package ledger

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func filterLedger(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock()}) // 12:00:00.001, .002, ...
	require.NoError(t, err)
	for _, r := range []Record{
		{Kind: KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/a.md"},           // 1
		{Kind: KindList, Agent: "alice", Grant: "G-alice", Path: "docs"},                // 2
		{Kind: KindDenied, Agent: "bob", Grant: "G-bob", Path: "oracle/x.md"},           // 3
		{Kind: KindRead, Agent: "bob", Grant: "G-bob", Path: "docs/sub/b.md"},           // 4
		{Kind: KindRead, Agent: "bob", Grant: "G-bob2", Path: "docsextra/c.md"},         // 5
		{Kind: KindFrozenRefused, Agent: "alice", Grant: "G-alice", Path: "deliv/d.md"}, // 6
	} {
		_, err := w.Append(r)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return path
}

func TestFilter(t *testing.T) {
	path := filterLedger(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name string
		f    Filter
		want []int64
	}{
		{"all", Filter{}, []int64{1, 2, 3, 4, 5, 6, 7}}, // 7: the closing checkpoint
		{"agent", Filter{Agent: "bob"}, []int64{3, 4, 5}},
		{"grant", Filter{Grant: "G-bob2"}, []int64{5}},
		{"kinds", Filter{Kinds: []Kind{KindDenied, KindFrozenRefused}}, []int64{3, 6}},
		{"prefix", Filter{Path: "docs"}, []int64{1, 2, 4}},
		{"prefix slash", Filter{Path: "docs/"}, []int64{1, 2, 4}},
		{"glob", Filter{Path: "**/*.md"}, []int64{1, 3, 4, 5, 6}},
		{"glob one level", Filter{Path: "docs/*"}, []int64{1}},
		{"since inclusive", Filter{Since: ms(4)}, []int64{4, 5, 6, 7}},
		{"until exclusive", Filter{Until: ms(3)}, []int64{1, 2}},
		{"window and agent", Filter{Agent: "bob", Since: ms(4), Until: ms(5)}, []int64{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			require.NoError(t, Scan(path, tt.f, func(r Record) error {
				got = append(got, r.Seq)
				return nil
			}))
			assert.Equal(t, tt.want, got)
		})
	}
	require.Error(t, Scan(path, Filter{Path: "docs/[a"}, func(Record) error { return nil }))
	stop := errors.New("stop")
	require.ErrorIs(t, Scan(path, Filter{}, func(Record) error { return stop }), stop)
}

func TestReaderLineErrors(t *testing.T) {
	rd := NewReader(strings.NewReader(`{"seq":1,"at":"x","kind":"read","prev":"","hash":"h"}` + "\nnope\n" + `{"seq":`))
	r, err := rd.Next()
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Seq)
	_, err = rd.Next()
	var le *LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, int64(2), le.Line)
	assert.False(t, le.Torn)
	_, err = rd.Next()
	require.ErrorAs(t, err, &le)
	assert.Equal(t, int64(3), le.Line)
	assert.True(t, le.Torn)
	_, err = rd.Next()
	assert.ErrorIs(t, err, io.EOF)
}

func TestReaderLongLines(t *testing.T) {
	long := `{"seq":1,"at":"x","kind":"read","path":"` + strings.Repeat("p", 200<<10) + `","prev":"","hash":"h"}`
	rd := NewReader(strings.NewReader(long + "\n" + long + "\n"))
	for i := 0; i < 2; i++ {
		r, err := rd.Next()
		require.NoError(t, err)
		assert.Len(t, r.Path, 200<<10)
	}
	_, err := rd.Next()
	assert.ErrorIs(t, err, io.EOF)
}

// A LineDecoder fed a file's lines one at a time reads what a Reader
// reads, in every format: a follower of a growing file loses nothing a
// version 3 line leaves out.
func TestLineDecoderReadsAsReader(t *testing.T) {
	for _, name := range []string{"golden.jsonl", "golden-v2.jsonl", "golden-v3.jsonl", "signed-v3/communication_ledger.jsonl"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "testdata", "ledger", name))
			require.NoError(t, err)
			var want []Record
			rd := NewReader(bytes.NewReader(data))
			for {
				r, err := rd.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				want = append(want, r)
			}
			require.NotEmpty(t, want)
			d := NewLineDecoder()
			var got []Record
			for _, line := range bytes.SplitAfter(data, []byte("\n")) {
				if len(line) == 0 {
					continue
				}
				r, err := d.Decode(bytes.TrimSuffix(line, []byte("\n")))
				require.NoError(t, err)
				got = append(got, r)
			}
			assert.Equal(t, want, got)
		})
	}
	_, err := NewLineDecoder().Decode([]byte(`{"seq":1,"version":99,"at":"x","kind":"read","hash":""}`))
	var ve *VersionError
	assert.ErrorAs(t, err, &ve, "a format it does not read is refused, not misread")
}
