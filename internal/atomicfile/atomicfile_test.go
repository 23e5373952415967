package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name string
		old  string // "" for no file yet
		new  string
		perm os.FileMode
	}{
		{"new file", "", "hello\n", 0o644},
		{"replace", "old content\n", "new\n", 0o600},
		{"empty", "something", "", 0o640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f.json")
			if tt.old != "" {
				require.NoError(t, os.WriteFile(p, []byte(tt.old), 0o666))
			}
			require.NoError(t, WriteFile(p, []byte(tt.new), tt.perm))
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, tt.new, string(b))
			st, err := os.Stat(p)
			require.NoError(t, err)
			assert.Equal(t, tt.perm, st.Mode().Perm())
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
}

func TestWriteLeavesTheOldFileWhenFillFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	boom := errors.New("boom")
	err := Write(p, 0o644, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half")
		return boom
	})
	require.ErrorIs(t, err, boom)
	b, _ := os.ReadFile(p)
	assert.Equal(t, "old", string(b))
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*"))
	assert.Empty(t, left)
	assert.True(t, strings.HasPrefix(TempPrefix("/x/protocol.json"), ".protocol.json.tmp-"))
}
