package fsid

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLocateIn(t *testing.T) {
	d := t.TempDir()
	folder := filepath.Join(d, "collab")
	require.NoError(t, os.MkdirAll(filepath.Join(folder, "a", "runs"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(d, "elsewhere"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "a", "runs", "key"), nil, 0o600))
	require.NoError(t, os.Symlink(filepath.Join(folder, "a", "runs"), filepath.Join(d, "link")))
	require.NoError(t, os.Symlink(folder, filepath.Join(d, "folder-link")))

	tests := []struct {
		name   string
		folder string
		path   string
		want   []Found
	}{
		{"a directory below", folder, filepath.Join(folder, "a", "runs"), []Found{{Path: filepath.Join(folder, "a", "runs"), Rel: "a/runs"}}},
		{"through a symlink", folder, filepath.Join(d, "link"), []Found{{Path: filepath.Join(d, "link"), Rel: "a/runs"}}},
		{"a file through a symlink", folder, filepath.Join(d, "link", "key"), []Found{{Path: filepath.Join(d, "link", "key"), Rel: "a/runs/key"}}},
		{"the folder through a symlink", filepath.Join(d, "folder-link"), filepath.Join(folder, "a"), []Found{{Path: filepath.Join(folder, "a"), Rel: "a"}}},
		{"dot-dot spelling", folder, filepath.Join(d, "elsewhere", "..", "collab", "a"), []Found{{Path: filepath.Join(d, "elsewhere", "..", "collab", "a"), Rel: "a"}}},
		{"outside", folder, filepath.Join(d, "elsewhere"), nil},
		{"above", folder, d, nil},
		{"the folder itself", folder, filepath.Join(d, "folder-link"), nil},
		{"not made yet, directory inside", folder, filepath.Join(d, "link", "ledger.jsonl"), []Found{{Path: filepath.Join(d, "link", "ledger.jsonl"), Rel: "a/runs/ledger.jsonl"}}},
		{"not made yet, directory missing", folder, filepath.Join(folder, "nope", "x"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LocateIn(tt.folder, []string{tt.path})
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestHoldKeepsIdentity(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, "x")
	require.NoError(t, os.Mkdir(p, 0o700))
	h, err := Hold(p)
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, os.Rename(p, filepath.Join(d, "y")))
	h2, err := Hold(filepath.Join(d, "y"))
	require.NoError(t, err)
	defer h2.Close()
	assert.Equal(t, h.ID, h2.ID, "a rename keeps what an entry is")
	_, err = Hold(p)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
