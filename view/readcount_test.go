package view

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// TestRepeatedReadsCountedPerView: repeated reads of any number of files
// make one count per flush interval, with the distinct files of that
// interval; refusals keep their own keys.
func TestRepeatedReadsCountedPerView(t *testing.T) {
	r := newRepeats()
	t0 := time.Now()
	key := func(i int) repeatKey {
		return repeatKey{kind: ledger.KindRead, op: ledger.OpOpen, path: fmt.Sprint("src/f", i), sha: fmt.Sprintf("%064d", i)}
	}
	const files = 5000
	for i := 0; i < files; i++ {
		r.recorded(key(i))
	}
	tests := []struct {
		name          string
		passes, files int
		want          readCount
	}{
		{"one pass over every file", 1, files, readCount{repeatCount: repeatCount{n: files}, contents: files}},
		{"three passes: each file counted once", 3, files, readCount{repeatCount: repeatCount{n: 3 * files}, contents: files}},
		{"a few files again and again", 100, 3, readCount{repeatCount: repeatCount{n: 300}, contents: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			for p := 0; p < tt.passes; p++ {
				for i := 0; i < tt.files; i++ {
					now = now.Add(time.Microsecond)
					require.True(t, r.again(key(i), now))
				}
			}
			pending, got := r.takeAll()
			assert.Empty(t, pending, "reads make no per-path count")
			assert.Equal(t, tt.want.n, got.n)
			assert.Equal(t, tt.want.contents, got.contents)
			assert.Equal(t, t0.Add(time.Microsecond), got.first)
			assert.Equal(t, now, got.last)
		})
	}
	_, none := r.takeAll()
	assert.Zero(t, none.n, "counts start again after a flush")

	deny := repeatKey{kind: ledger.KindDenied, op: ledger.OpLookup, path: "oracle/a.md", why: "hidden"}
	r.recorded(deny)
	require.True(t, r.again(deny, t0))
	require.True(t, r.again(key(0), t0))
	pending, reads := r.takeAll()
	assert.Len(t, pending, 1, "a refusal keeps its key")
	assert.Equal(t, int64(1), reads.n)
}
