package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnknownVersionRefused: a ledger in a format this package does not
// know is refused with one line naming its version, by every reader.
func TestUnknownVersionRefused(t *testing.T) {
	src := filepath.Join("..", "testdata", "ledger", "future-v4.jsonl")
	path := filepath.Join(t.TempDir(), "l.jsonl")
	require.NoError(t, os.WriteFile(path, fileBytes(t, src), 0o600))
	tests := []struct {
		name string
		read func() error
	}{
		{"verify", func() error { _, err := Verify(path); return err }},
		{"verify slow path", func() error { _, err := verifyWith(path, VerifyOptions{}, true); return err }},
		{"scan", func() error { return Scan(path, Filter{}, func(Record) error { return nil }) }},
		{"writer", func() error {
			w, err := Open(path, Options{Sync: SyncOff})
			if err == nil {
				_ = w.Close()
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.read()
			var ve *VersionError
			require.True(t, errors.As(err, &ve), "%v", err)
			assert.Equal(t, int64(4), ve.Version)
			assert.Equal(t, path, ve.File)
			msg := err.Error()
			assert.NotContains(t, msg, "\n")
			assert.Contains(t, msg, "format version 4")
			assert.Contains(t, msg, "newer acpfs")
		})
	}
}

// TestVersionStamped: a writer states the current version in the first
// record of every file it starts, and nowhere else; a stray version is a
// problem.
func TestVersionStamped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	w, err := Open(path, Options{Sync: SyncOff, SegmentBytes: 4 << 10})
	require.NoError(t, err)
	for range 100 {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/some/file.md", Version: 7})
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	files, err := Segments(path)
	require.NoError(t, err)
	require.Greater(t, len(files), 1)
	for _, name := range files {
		var seen []int64
		rd := NewReader(strings.NewReader(string(fileBytes(t, name))))
		for {
			r, err := rd.Next()
			if err != nil {
				break
			}
			seen = append(seen, r.Version)
		}
		require.NotEmpty(t, seen, name)
		assert.Equal(t, int64(CurrentVersion), seen[0], "%s starts with its version", name)
		for _, v := range seen[1:] {
			assert.Zero(t, v, "%s: only the first record states the version", name)
		}
	}
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problem)

	// A version on a record that starts no file is no writer's.
	lines := strings.SplitAfter(string(fileBytes(t, files[0])), "\n")
	rd := NewReader(strings.NewReader(lines[0] + lines[1]))
	r1, err := rd.Next()
	require.NoError(t, err)
	r, err := rd.Next()
	require.NoError(t, err)
	r.Version = CurrentVersion
	le := NewLineEncoder(CurrentVersion)
	le.After(r1)
	line, err := le.Encode(&r)
	require.NoError(t, err)
	lines[1] = string(line)
	rep, err = VerifyStream(strings.NewReader(strings.Join(lines[:2], "")))
	require.NoError(t, err)
	require.NotNil(t, rep.Problem)
	assert.Equal(t, ProblemNonCanonical, rep.Problem.Kind)
	assert.Contains(t, rep.Problem.Reason, "does not start a file")
}
