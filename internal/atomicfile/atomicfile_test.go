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

func TestTemp(t *testing.T) {
	tests := []struct {
		name      string
		install   bool   // Install the finished file
		target    string // name to install it as, relative to the directory
		wantErr   bool
		wantFinal string // content at "f" afterwards
	}{
		{name: "installed", install: true, target: "f", wantFinal: "new"},
		{name: "discarded", wantFinal: "old"},
		{name: "installed under a name chosen afterwards", install: true, target: "g", wantFinal: "old"},
		{name: "refused outside its directory", install: true, target: "sub/f", wantErr: true, wantFinal: "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644))
			tmp, err := NewTemp(dir, "f")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(filepath.Base(tmp.Name()), TempPrefix("f")))
			_, err = io.WriteString(tmp, "new")
			require.NoError(t, err)
			require.NoError(t, tmp.Finish(0o444))
			if tt.install {
				err = tmp.Install(filepath.Join(dir, tt.target))
				if tt.wantErr {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
					st, err := os.Stat(filepath.Join(dir, tt.target))
					require.NoError(t, err)
					assert.Equal(t, os.FileMode(0o444), st.Mode().Perm())
				}
			}
			tmp.Discard()
			tmp.Discard()
			b, err := os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.Equal(t, tt.wantFinal, string(b))
			left, _ := filepath.Glob(filepath.Join(dir, ".*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
}

func TestWriteCacheAndPermOf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cache.json")
	assert.Equal(t, os.FileMode(0o644), PermOf(p, 0o644), "no file: the default")
	require.NoError(t, WriteCache(p, []byte("v1"), 0o600))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "v1", string(b))
	assert.Equal(t, os.FileMode(0o600), PermOf(p, 0o644), "the file's own mode")
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	assert.Empty(t, left)
}
