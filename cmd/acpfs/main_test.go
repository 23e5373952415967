package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the state caches of `acpfs append` (see
// protocol.DefaultStateCachePath) in a directory of the test run.
func TestMain(m *testing.M) {
	restartChild()
	dir, err := os.MkdirTemp("", "acpfs-cmd-state-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("ACPFS_STATE_CACHE_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
