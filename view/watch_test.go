package view

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWatcherSurvivesDirectorySwaps: directories exchanged again and
// again (renameat2 RENAME_EXCHANGE, which anyone who can write the folder
// may run) never stop the watcher's goroutine, which would take the
// daemon and every view with it; at worst the watcher degrades.
func TestWatcherSurvivesDirectorySwaps(t *testing.T) {
	folder := t.TempDir()
	for _, d := range []string{"a/x/y", "b/z", "c/w/v", "d"} {
		require.NoError(t, os.MkdirAll(filepath.Join(folder, d), 0o755))
	}
	wt, err := NewWatcher(folder, nil)
	require.NoError(t, err)
	pairs := [][2]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b/z", "d"}}
	for i := 0; i < 4000; i++ {
		p := pairs[i%len(pairs)]
		// A pair may be nested after earlier swaps (EINVAL): skip it.
		_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(folder, p[0]), unix.AT_FDCWD, filepath.Join(folder, p[1]), unix.RENAME_EXCHANGE)
	}
	// A change after the swaps is still followed, and Close returns once
	// the loop ends: the loop is alive.
	require.NoError(t, os.Mkdir(filepath.Join(folder, "after"), 0o755))
	require.NoError(t, wt.Close())
}
