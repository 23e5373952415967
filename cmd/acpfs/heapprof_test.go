package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeapProfileOnSIGUSR2: with ACPFS_HEAP_PROFILE set, SIGUSR2 writes
// a gzipped pprof heap profile to the file named, whole.
func TestHeapProfileOnSIGUSR2(t *testing.T) {
	p := filepath.Join(t.TempDir(), "heap.pb.gz")
	t.Setenv(heapProfileEnv, p)
	stop := startHeapProfiler()
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR2))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no profile written")
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a gzipped profile")
	_, err = os.Stat(p + ".tmp")
	assert.ErrorIs(t, err, os.ErrNotExist, "renamed into place")
}
